//! Human-readable renderings of projections: the descendant tree and the
//! children table. Pure functions of the state, golden-tested.

use std::fmt::Write;

use subagent_core::{CatalogMode, SessionId, SubagentListEntry};
use subagent_projections::{Activity, Projections, RunPhase};

fn mode_word(entry: &SubagentListEntry) -> &'static str {
    match (entry.entry.mode, entry.entry.external) {
        (CatalogMode::Continuable, _) => "continuable",
        (CatalogMode::OneShot, true) => "one-shot external",
        (CatalogMode::OneShot, false) => "one-shot",
        (CatalogMode::Unknown, _) => "unknown",
    }
}

/// Status words of one child: activity or run phase, and the last stop reason.
fn status(state: &Projections, child: SessionId) -> String {
    if let Some(run) = state.runs.get(&child) {
        let phase = match run.phase {
            RunPhase::Requested => "requested",
            RunPhase::Started => "running",
            RunPhase::Settled => "settled",
            RunPhase::Disposed => "disposed",
            RunPhase::StartFailed => "start-failed",
        };
        return match &run.result {
            Some(result) => format!("{phase} · {}", result.stop_reason),
            None => phase.to_owned(),
        };
    }
    let activity = match state.activity(child) {
        Activity::Running => "running",
        Activity::Idle => "idle",
        Activity::Inactive => "inactive",
    };
    match state
        .activations
        .get(&child)
        .and_then(|a| a.last_result.as_ref())
    {
        Some((_, result)) => format!("{activity} · {}", result.stop_reason),
        None => activity.to_owned(),
    }
}

fn describe(state: &Projections, listed: &SubagentListEntry) -> String {
    let entry = &listed.entry;
    let mut line = format!(
        "{}  [{} · {} · {}]  {}",
        entry.label,
        mode_word(listed),
        entry.provider,
        status(state, entry.child_id),
        entry.child_id
    );
    if let Some(diagnostic) = &listed.diagnostic {
        let _ = write!(line, "  ! {diagnostic}");
    }
    line
}

/// The subtree below `root` drawn with box characters, one session a line.
#[must_use]
pub fn tree(state: &Projections, root: SessionId) -> String {
    let mut out = String::new();
    let label = state
        .sessions
        .get(&root)
        .map_or("(unknown session)", |s| s.label.as_str());
    let _ = writeln!(out, "{label}  [{}]  {root}", status(state, root));
    let entries = state.list_descendants(root);
    for (index, entry) in entries.iter().enumerate() {
        let later = &entries[index + 1..];
        // The node at `depth` has a later sibling when the next entry at or
        // above that depth is at exactly that depth.
        let has_later_sibling = |depth: u64| {
            later
                .iter()
                .find(|e| e.depth <= depth)
                .is_some_and(|e| e.depth == depth)
        };
        let prefix: String = (1..entry.depth)
            .map(|level| {
                if has_later_sibling(level) {
                    "│   "
                } else {
                    "    "
                }
            })
            .collect();
        let branch = if has_later_sibling(entry.depth) {
            "├── "
        } else {
            "└── "
        };
        let _ = writeln!(out, "{prefix}{branch}{}", describe(state, &entry.entry));
    }
    out
}

/// The direct children of `parent`, one line each, in catalog order.
#[must_use]
pub fn children(state: &Projections, parent: SessionId) -> String {
    let mut out = String::new();
    for (index, listed) in state.list_children(parent).iter().enumerate() {
        let _ = writeln!(out, "{:>3}. {}", index + 1, describe(state, listed));
    }
    if out.is_empty() {
        out.push_str("(no children)\n");
    }
    out
}

/// A readable summary of every projection: sessions by root, live work,
/// inboxes and providers.
#[must_use]
pub fn summary(state: &Projections) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "state at position {}", state.position);
    let _ = writeln!(
        out,
        "sessions: {} ({} roots)",
        state.sessions.len(),
        state.roots.len()
    );
    for root in &state.roots {
        out.push_str(&tree(state, *root));
    }
    let live = state.live_activations();
    let _ = writeln!(out, "live activations: {}", live.len());
    for (id, activation) in live {
        let _ = writeln!(
            out,
            "  {id} epoch {} {:?}",
            activation.epoch, activation.phase
        );
    }
    let mut inboxes: Vec<_> = state
        .inboxes
        .iter()
        .filter(|(_, inbox)| !inbox.pending.is_empty())
        .collect();
    inboxes.sort_by_key(|(id, _)| **id);
    let _ = writeln!(out, "sessions with pending messages: {}", inboxes.len());
    for (id, inbox) in inboxes {
        let _ = writeln!(
            out,
            "  {id}: {} pending, {} claimed",
            inbox.pending.len(),
            inbox.claimed.len()
        );
    }
    let names: Vec<&str> = state.providers.iter().map(|p| p.name.as_str()).collect();
    let _ = writeln!(
        out,
        "providers: {}",
        if names.is_empty() {
            "(none)".to_owned()
        } else {
            names.join(", ")
        }
    );
    if !state.admission_closed.is_empty() {
        let _ = writeln!(
            out,
            "admission closed below: {}",
            state.admission_closed.len()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use subagent_core::{
        Delivery, Event, SessionMode, StreamId, SubagentResult, SubagentRunId, SubagentStopReason,
    };
    use subagent_projections::testing::HistoryBuilder;

    /// Replaces every session id with a stable alias so output is comparable.
    fn aliased(text: &str, ids: &[(SessionId, &str)]) -> String {
        ids.iter().fold(text.to_owned(), |text, (id, alias)| {
            text.replace(&id.to_string(), alias)
        })
    }

    fn sample() -> (Projections, Vec<(SessionId, &'static str)>) {
        let mut history = HistoryBuilder::new();
        let root = history.root("root");
        let a = history.child(root, 1, "research", SessionMode::Continuable, false);
        let a1 = history.child(a, 2, "dig", SessionMode::Continuable, false);
        let a2 = history.child(a, 2, "scan", SessionMode::OneShot, true);
        let a11 = history.child(a1, 3, "deeper", SessionMode::Continuable, false);
        let b = history.child(root, 1, "lint", SessionMode::OneShot, true);
        let message = history.message(a, root);
        history.activation(a, 1, 1, vec![message]);
        let run_id = SubagentRunId::new();
        let stream = StreamId::Session(b);
        history.push(
            stream,
            Event::RunRequested {
                run_id,
                provider: "process".into(),
                delivery: Delivery::Parent,
            },
        );
        history.push(stream, Event::RunStarted { run_id });
        history.push(
            stream,
            Event::RunSettled {
                run_id,
                result: SubagentResult::failed(SubagentStopReason::Error, vec![], "exit 2"),
            },
        );
        history.push(
            StreamId::Session(a1),
            Event::ActivationRequested {
                epoch: 1,
                delivery: Delivery::Parent,
                output_schema: None,
            },
        );
        history.push(
            StreamId::Session(a1),
            Event::TurnStarted { turn: 1, epoch: 1 },
        );
        let state = Projections::fold(&history.records);
        (
            state,
            vec![
                (root, "ROOT"),
                (a, "A"),
                (a1, "A1"),
                (a2, "A2"),
                (a11, "A11"),
                (b, "B"),
            ],
        )
    }

    #[test]
    fn tree_output_is_stable() {
        let (state, ids) = sample();
        let expected = "\
root  [inactive]  ROOT
├── research  [continuable · spawn · inactive · completed]  A
│   ├── dig  [continuable · spawn · running]  A1
│   │   └── deeper  [continuable · spawn · inactive]  A11
│   └── scan  [one-shot external · process · inactive]  A2
└── lint  [one-shot external · process · settled · error]  B
";
        assert_eq!(aliased(&tree(&state, ids[0].0), &ids), expected);
    }

    #[test]
    fn children_output_is_stable() {
        let (state, ids) = sample();
        let expected = "  1. research  [continuable · spawn · inactive · completed]  A
  2. lint  [one-shot external · process · settled · error]  B
";
        assert_eq!(aliased(&children(&state, ids[0].0), &ids), expected);
        assert_eq!(children(&state, ids[4].0), "(no children)\n");
    }
}
