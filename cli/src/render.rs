//! Human-readable renderings of projections: the descendant tree, the
//! children table and the state summary. Pure functions of the state that
//! write to any `io::Write` (the command's stdout, or a buffer in tests),
//! golden-tested.
//!
//! Text a caller chose (labels, provider names, diagnostics) is written
//! through [`Shown`], with its control characters escaped: a label sent over
//! the gateway holding a terminal escape sequence, or a newline, cannot
//! restyle an operator's terminal or forge a line of the tree.
//!
//! Rendering is linear in the number of sessions: the tree's guide columns
//! come from one backward pass over the preorder listing, and at most
//! [`DRAWN_LEVELS`] guide columns are drawn per line, so a 20,000-deep chain
//! prints 20,000 short lines rather than 800 MB of indentation.

use std::io::{self, Write};

use subagent_core::{CatalogMode, SessionId, SubagentDescendantListEntry, SubagentListEntry};
use subagent_projections::{Projections, SessionStatus};

/// Guide columns drawn at most per tree line. A session deeper than this
/// keeps the first `DRAWN_LEVELS` columns and shows its depth instead of the
/// rest: `[depth 20000] └── label ...`.
pub(crate) const DRAWN_LEVELS: usize = 32;

/// Caller-chosen text as written to a terminal: every control character
/// (C0, DEL, C1) escaped as Rust writes it (`\u{1b}`, `\n`), the rest as
/// it is.
struct Shown<'a>(&'a str);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

fn mode_word(entry: &SubagentListEntry) -> &'static str {
    match (entry.entry.mode, entry.entry.external) {
        (CatalogMode::Continuable, _) => "continuable",
        (CatalogMode::OneShot, true) => "one-shot external",
        (CatalogMode::OneShot, false) => "one-shot",
        (CatalogMode::Unknown, _) => "unknown",
    }
}

/// Status words of one session: its state, and its last stop reason
/// ([`SessionStatus`], the view the console shows too).
fn status(state: &Projections, session: SessionId) -> String {
    let status = SessionStatus::of(state, session);
    match &status.stop_reason {
        Some(stop_reason) => format!("{} · {stop_reason}", status.state.as_str()),
        None => status.state.as_str().to_owned(),
    }
}

/// Writes one child's description (no newline), with the delegation
/// call that started it when an agent did.
fn describe(
    out: &mut dyn Write,
    state: &Projections,
    listed: &SubagentListEntry,
) -> io::Result<()> {
    let entry = &listed.entry;
    write!(
        out,
        "{}  [{} · {} · {}]  {}",
        Shown(&entry.label),
        mode_word(listed),
        Shown(&entry.provider),
        status(state, entry.child_id),
        entry.child_id
    )?;
    let requested_by = state
        .sessions
        .get(&entry.child_id)
        .and_then(|record| record.requested_by.as_ref());
    if let Some(call) = requested_by {
        write!(out, "  ← {} of turn {}", Shown(&call.call_id), call.turn)?;
    }
    if let Some(diagnostic) = &listed.diagnostic {
        write!(out, "  ! {}", Shown(diagnostic))?;
    }
    Ok(())
}

/// For each entry of a preorder listing: whether a later sibling follows it
/// (the next entry at or above its depth is at exactly its depth). One
/// backward pass: `open[d]` says whether an entry at depth `d` was seen since
/// the last entry shallower than `d`.
fn later_siblings(entries: &[SubagentDescendantListEntry]) -> Vec<bool> {
    let mut has_later = vec![false; entries.len()];
    let mut open: Vec<bool> = Vec::new();
    for (index, entry) in entries.iter().enumerate().rev() {
        let depth = usize::try_from(entry.depth).unwrap_or(usize::MAX);
        has_later[index] = open.get(depth).copied().unwrap_or(false);
        // Entries deeper than this one, seen later, are not siblings of
        // anything before it.
        open.truncate(depth.saturating_add(1));
        if open.len() <= depth {
            open.resize(depth + 1, false);
        }
        open[depth] = true;
    }
    has_later
}

/// Writes the subtree below `root` drawn with box characters, one session a
/// line (see [`DRAWN_LEVELS`] for very deep trees).
///
/// # Errors
/// A write failure of `out`.
pub(crate) fn tree(out: &mut dyn Write, state: &Projections, root: SessionId) -> io::Result<()> {
    let label = state
        .sessions
        .get(&root)
        .map_or("(unknown session)", |s| s.label.as_str());
    writeln!(out, "{}  [{}]  {root}", Shown(label), status(state, root))?;
    let entries = state.list_descendants(root);
    let has_later = later_siblings(&entries);
    // guides[l - 1]: whether the current ancestor at depth l has a later
    // sibling, i.e. whether column l continues with a bar. Kept for the
    // drawn levels only.
    let mut guides: Vec<bool> = Vec::with_capacity(DRAWN_LEVELS);
    for (entry, later) in entries.iter().zip(has_later) {
        let depth = usize::try_from(entry.depth).unwrap_or(usize::MAX);
        let ancestors = depth.saturating_sub(1);
        guides.truncate(ancestors);
        for &bar in &guides {
            out.write_all(if bar { "│   " } else { "    " }.as_bytes())?;
        }
        if ancestors > DRAWN_LEVELS {
            write!(out, "[depth {depth}] ")?;
        }
        out.write_all(if later { "├── " } else { "└── " }.as_bytes())?;
        describe(out, state, &entry.entry)?;
        out.write_all(b"\n")?;
        if guides.len() == ancestors && guides.len() < DRAWN_LEVELS {
            guides.push(later);
        }
    }
    Ok(())
}

/// Writes the direct children of `parent`, one line each, in catalog order.
///
/// # Errors
/// A write failure of `out`.
pub(crate) fn children(
    out: &mut dyn Write,
    state: &Projections,
    parent: SessionId,
) -> io::Result<()> {
    let listed = state.list_children(parent);
    if listed.is_empty() {
        return writeln!(out, "(no children)");
    }
    for (index, child) in listed.iter().enumerate() {
        write!(out, "{:>3}. ", index + 1)?;
        describe(out, state, child)?;
        writeln!(out)?;
    }
    Ok(())
}

/// Writes a readable summary of every projection: sessions by root, live
/// work, inboxes and providers.
///
/// # Errors
/// A write failure of `out`.
pub(crate) fn summary(out: &mut dyn Write, state: &Projections) -> io::Result<()> {
    writeln!(out, "state at position {}", state.position)?;
    writeln!(
        out,
        "sessions: {} ({} roots)",
        state.sessions.len(),
        state.roots.len()
    )?;
    for root in &state.roots {
        tree(out, state, *root)?;
    }
    let live = state.live_activations();
    writeln!(out, "live activations: {}", live.len())?;
    for (id, activation) in live {
        writeln!(
            out,
            "  {id} epoch {} {:?}",
            activation.epoch, activation.phase
        )?;
    }
    let mut inboxes: Vec<_> = state
        .inboxes
        .iter()
        .filter(|(_, inbox)| !inbox.pending.is_empty())
        .collect();
    inboxes.sort_by_key(|(id, _)| **id);
    writeln!(out, "sessions with pending messages: {}", inboxes.len())?;
    for (id, inbox) in inboxes {
        writeln!(
            out,
            "  {id}: {} pending, {} claimed",
            inbox.pending.len(),
            inbox.claimed.len()
        )?;
    }
    let names: Vec<String> = state
        .providers
        .iter()
        .map(|p| Shown(&p.name).to_string())
        .collect();
    writeln!(
        out,
        "providers: {}",
        if names.is_empty() {
            "(none)".to_owned()
        } else {
            names.join(", ")
        }
    )?;
    if !state.admission_closed.is_empty() {
        writeln!(
            out,
            "admission closed below: {}",
            state.admission_closed.len()
        )?;
    }
    Ok(())
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
                requested_by: None,
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
                requested_by: None,
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

    fn rendered(draw: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> String {
        let mut out = Vec::new();
        draw(&mut out).expect("writing to a Vec cannot fail");
        String::from_utf8(out).expect("utf-8")
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
        let drawn = rendered(|out| tree(out, &state, ids[0].0));
        assert_eq!(aliased(&drawn, &ids), expected);
    }

    #[test]
    fn children_output_is_stable() {
        let (state, ids) = sample();
        let expected = "  1. research  [continuable · spawn · inactive · completed]  A
  2. lint  [one-shot external · process · settled · error]  B
";
        let listed = rendered(|out| children(out, &state, ids[0].0));
        assert_eq!(aliased(&listed, &ids), expected);
        let none = rendered(|out| children(out, &state, ids[4].0));
        assert_eq!(none, "(no children)\n");
    }

    #[test]
    fn control_characters_in_labels_are_escaped_not_sent_to_the_terminal() {
        let mut history = HistoryBuilder::new();
        let root = history.root("root\u{1b}]0;owned\u{7}");
        let child = history.child(
            root,
            1,
            "a\nforged  [continuable · spawn · inactive]  line\u{9b}31m",
            SessionMode::Continuable,
            false,
        );
        let state = Projections::fold(&history.records);
        let drawn = rendered(|out| tree(out, &state, root));
        assert!(
            !drawn.chars().any(|c| c.is_control() && c != '\n'),
            "{drawn:?}"
        );
        assert_eq!(drawn.lines().count(), 2, "one line a session: {drawn:?}");
        assert!(
            drawn.starts_with("root\\u{1b}]0;owned\\u{7}  [inactive]"),
            "{drawn:?}"
        );
        assert!(drawn.contains("a\\nforged  ["), "{drawn:?}");
        assert!(drawn.contains("line\\u{9b}31m"), "{drawn:?}");
        let listed = rendered(|out| children(out, &state, root));
        assert_eq!(listed.lines().count(), 1, "{listed:?}");
        assert!(listed.contains(&child.to_string()));
    }

    /// A chain `depth` sessions deep below one root, labelled `c1`, `c2`, ...
    fn chain(depth: u64) -> (Projections, SessionId) {
        let mut history = HistoryBuilder::new();
        let root = history.chain(depth);
        (Projections::fold(&history.records), root)
    }

    #[test]
    fn a_20000_deep_chain_renders_one_line_per_session_with_bounded_indentation() {
        let depth = 20_000;
        let (state, root) = chain(depth);
        let drawn = rendered(|out| tree(out, &state, root));
        let lines: Vec<&str> = drawn.lines().collect();
        assert_eq!(lines.len(), 20_001, "the root and one line per session");
        assert!(lines[0].starts_with("root  [inactive]  "));
        for (level, line) in (1..=depth).zip(&lines[1..]) {
            let ancestors = usize::try_from(level).unwrap() - 1;
            let expected = if ancestors > DRAWN_LEVELS {
                format!(
                    "{}[depth {level}] └── c{level}  [",
                    " ".repeat(4 * DRAWN_LEVELS)
                )
            } else {
                format!("{}└── c{level}  [", " ".repeat(4 * ancestors))
            };
            assert!(line.starts_with(&expected), "depth {level}: {line:?}");
        }
        let last = lines.last().unwrap();
        assert!(
            last.starts_with(&format!("{}[depth 20000] └── c20000  [", " ".repeat(128))),
            "{last:?}"
        );
    }

    #[test]
    fn guides_below_the_drawn_levels_keep_their_bars_and_branches() {
        let mut history = HistoryBuilder::new();
        let root = history.root("root");
        // A trunk 40 deep; at depth 35 a second child hangs off depth 34.
        let mut trunk = vec![root];
        for level in 1..=40u64 {
            let parent = trunk[usize::try_from(level).unwrap() - 1];
            trunk.push(history.child(
                parent,
                level,
                &format!("t{level}"),
                SessionMode::Continuable,
                false,
            ));
        }
        history.child(trunk[34], 35, "side", SessionMode::Continuable, false);
        let state = Projections::fold(&history.records);
        let drawn = rendered(|out| tree(out, &state, root));
        let lines: Vec<&str> = drawn.lines().collect();
        // Lines 1..=34 are t1..t34; t35 has a later sibling (side), so the
        // column of depth 35 carries a bar beyond the drawn levels: it is
        // cut, and the depth says where the line is.
        let gap = " ".repeat(4 * DRAWN_LEVELS);
        assert!(
            lines[35].starts_with(&format!("{gap}[depth 35] ├── t35  [")),
            "{}",
            lines[35]
        );
        assert!(
            lines[36].starts_with(&format!("{gap}[depth 36] └── t36  [")),
            "{}",
            lines[36]
        );
        assert!(
            lines[41].starts_with(&format!("{gap}[depth 35] └── side  [")),
            "{}",
            lines[41]
        );
        assert_eq!(lines.len(), 42);
    }

    /// The definition `later_siblings` computes in one pass: the next entry
    /// at or above the entry's depth is at exactly its depth.
    fn later_siblings_by_definition(entries: &[SubagentDescendantListEntry]) -> Vec<bool> {
        (0..entries.len())
            .map(|index| {
                entries[index + 1..]
                    .iter()
                    .find(|e| e.depth <= entries[index].depth)
                    .is_some_and(|e| e.depth == entries[index].depth)
            })
            .collect()
    }

    #[test]
    fn later_siblings_match_their_definition_on_a_ragged_tree() {
        let mut history = HistoryBuilder::new();
        let root = history.root("root");
        // Each session hangs below a pseudo-random earlier one, most often
        // one of the last few: a fixed mix of fan-out, chains and back-jumps
        // of many levels.
        let mut sessions = vec![(root, 0u64)];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for index in 1..600usize {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let pick = usize::try_from(seed >> 33).unwrap();
            let parent_index = if pick % 3 == 0 {
                pick % index
            } else {
                index - 1 - pick % index.min(4)
            };
            let (parent, depth) = sessions[parent_index];
            let child = history.child(parent, depth + 1, "n", SessionMode::Continuable, false);
            sessions.push((child, depth + 1));
        }
        let state = Projections::fold(&history.records);
        let entries = state.list_descendants(root);
        assert_eq!(entries.len(), 599);
        assert!(entries.iter().any(|e| e.depth > 3), "the tree has depth");
        assert_eq!(
            later_siblings(&entries),
            later_siblings_by_definition(&entries)
        );
    }
}
