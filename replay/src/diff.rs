//! What changed between two states of the projections: a domain-level
//! [`diff`] (sessions added, activations started or settled, messages
//! accepted or claimed, ...) and a [`structural_diff`] that names every
//! differing field, for `verify`.

use std::fmt;

use serde::Serialize;
use serde_json::Value;
use subagent_core::{SessionId, SubagentStopReason};
use subagent_projections::{Projections, RunPhase};

/// One domain-level change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "kebab-case")]
pub enum Change {
    /// A session was created.
    SessionAdded {
        /// The session.
        session: SessionId,
        /// Its parent.
        parent: Option<SessionId>,
        /// Its label.
        label: String,
    },
    /// An activation epoch started (requested).
    ActivationStarted {
        /// The session.
        session: SessionId,
        /// The epoch.
        epoch: u64,
    },
    /// An activation settled.
    ActivationSettled {
        /// The session.
        session: SessionId,
        /// The epoch.
        epoch: u64,
        /// How it ended.
        stop_reason: SubagentStopReason,
    },
    /// A live activation ended (released or abandoned).
    ActivationEnded {
        /// The session.
        session: SessionId,
        /// The epoch.
        epoch: u64,
    },
    /// An external run changed phase.
    RunPhase {
        /// The external child.
        session: SessionId,
        /// The new phase.
        phase: RunPhase,
    },
    /// Messages were accepted into an inbox.
    MessagesAccepted {
        /// The session.
        session: SessionId,
        /// How many.
        count: u64,
    },
    /// Messages were claimed by turns.
    MessagesClaimed {
        /// The session.
        session: SessionId,
        /// How many.
        count: usize,
    },
    /// Providers registered or removed: the registry now lists these.
    ProvidersChanged {
        /// Registered names, in order.
        providers: Vec<String>,
    },
    /// Admission below these parents is now closed.
    AdmissionChanged {
        /// Closed parents.
        closed: Vec<SessionId>,
    },
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::SessionAdded {
                session,
                parent,
                label,
            } => match parent {
                Some(parent) => write!(f, "+ session {session} {label:?} below {parent}"),
                None => write!(f, "+ root session {session} {label:?}"),
            },
            Change::ActivationStarted { session, epoch } => {
                write!(f, "▶ activation {epoch} of {session} started")
            }
            Change::ActivationSettled {
                session,
                epoch,
                stop_reason,
            } => {
                write!(
                    f,
                    "✓ activation {epoch} of {session} settled: {stop_reason}"
                )
            }
            Change::ActivationEnded { session, epoch } => {
                write!(f, "■ activation {epoch} of {session} ended")
            }
            Change::RunPhase { session, phase } => write!(f, "• run of {session} is now {phase:?}"),
            Change::MessagesAccepted { session, count } => {
                write!(f, "✉ {count} message(s) accepted by {session}")
            }
            Change::MessagesClaimed { session, count } => {
                write!(f, "✉ {count} message(s) claimed by {session}")
            }
            Change::ProvidersChanged { providers } => {
                write!(f, "⚙ providers now: {}", providers.join(", "))
            }
            Change::AdmissionChanged { closed } => {
                write!(f, "⛔ admission closed below {} parent(s)", closed.len())
            }
        }
    }
}

fn sorted<T, K: Ord + Copy>(items: impl Iterator<Item = (K, T)>) -> Vec<(K, T)> {
    let mut items: Vec<_> = items.collect();
    items.sort_by_key(|(key, _)| *key);
    items
}

/// The domain-level changes from `before` to `after` (an earlier and a later
/// state of the same log), ordered by kind, then by session id.
#[must_use]
pub fn diff(before: &Projections, after: &Projections) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut added: Vec<_> = after
        .sessions
        .values()
        .filter(|s| !before.sessions.contains_key(&s.id))
        .collect();
    added.sort_by_key(|s| s.created_at);
    changes.extend(added.into_iter().map(|s| Change::SessionAdded {
        session: s.id,
        parent: s.parent,
        label: s.label.clone(),
    }));
    for (session, state) in sorted(after.activations.iter().map(|(k, v)| (*k, v))) {
        let old = before.activations.get(&session);
        let old_epoch = old.map_or(0, |o| o.epoch);
        if state.epoch > old_epoch {
            changes.push(Change::ActivationStarted {
                session,
                epoch: state.epoch,
            });
        }
        let old_result = old.and_then(|o| o.last_result.as_ref().map(|(epoch, _)| *epoch));
        if let Some((epoch, result)) = &state.last_result {
            if old_result != Some(*epoch) {
                changes.push(Change::ActivationSettled {
                    session,
                    epoch: *epoch,
                    stop_reason: result.stop_reason.clone(),
                });
            }
        }
        if let Some(live) = old.and_then(|o| o.live.as_ref()) {
            if state
                .live
                .as_ref()
                .is_none_or(|now| now.epoch != live.epoch)
            {
                changes.push(Change::ActivationEnded {
                    session,
                    epoch: live.epoch,
                });
            }
        }
    }
    for (session, run) in sorted(after.runs.iter().map(|(k, v)| (*k, v))) {
        if before
            .runs
            .get(&session)
            .is_none_or(|old| old.phase != run.phase)
        {
            changes.push(Change::RunPhase {
                session,
                phase: run.phase,
            });
        }
    }
    for (session, inbox) in sorted(after.inboxes.iter().map(|(k, v)| (*k, v))) {
        let old = before.inboxes.get(&session);
        let accepted = inbox.accepted - old.map_or(0, |o| o.accepted);
        if accepted > 0 {
            changes.push(Change::MessagesAccepted {
                session,
                count: accepted,
            });
        }
        let claimed = inbox.claimed.len() - old.map_or(0, |o| o.claimed.len());
        if claimed > 0 {
            changes.push(Change::MessagesClaimed {
                session,
                count: claimed,
            });
        }
    }
    if before.providers != after.providers {
        changes.push(Change::ProvidersChanged {
            providers: after.providers.iter().map(|p| p.name.clone()).collect(),
        });
    }
    if before.admission_closed != after.admission_closed {
        changes.push(Change::AdmissionChanged {
            closed: after.admission_closed.iter().copied().collect(),
        });
    }
    changes
}

/// Every field path where `left` and `right` differ (at most `limit`), as
/// `path: left != right`, comparing their JSON forms.
#[must_use]
pub fn structural_diff(left: &Projections, right: &Projections, limit: usize) -> Vec<String> {
    let (Ok(left), Ok(right)) = (serde_json::to_value(left), serde_json::to_value(right)) else {
        return vec!["states do not serialize".to_owned()];
    };
    let mut out = Vec::new();
    compare("$", &left, &right, limit, &mut out);
    out
}

fn compare(path: &str, left: &Value, right: &Value, limit: usize, out: &mut Vec<String>) {
    if out.len() >= limit || left == right {
        return;
    }
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => {
            let mut keys: Vec<&String> = l.keys().chain(r.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let (a, b) = (
                    l.get(key).unwrap_or(&Value::Null),
                    r.get(key).unwrap_or(&Value::Null),
                );
                compare(&format!("{path}.{key}"), a, b, limit, out);
            }
        }
        (Value::Array(l), Value::Array(r)) if l.len() == r.len() => {
            for (index, (a, b)) in l.iter().zip(r).enumerate() {
                compare(&format!("{path}[{index}]"), a, b, limit, out);
            }
        }
        _ => out.push(format!("{path}: {} != {}", short(left), short(right))),
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}
