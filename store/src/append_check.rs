//! Append checks: what every backend checks, in the same order, before
//! it writes anything. Public so a backend in another crate (`subagent-pg`)
//! runs exactly these checks, numbering and encoding, not a copy of them. Pure: the backend supplies the stream's version and an
//! event-id lookup, and gets back a verdict. Then [`place`] numbers the
//! checked events (checked: a damaged head or stream index cannot wrap a
//! number) and [`encode_records`] encodes them, refusing an event larger
//! than [`MAX_EVENT_BYTES`].

use std::collections::HashSet;

use subagent_core::{EventId, NewEvent, RecordedEvent, StreamId, MAX_EVENT_BYTES};

use crate::error::StoreError;
use crate::log::{AppendOutcome, ExpectedVersion, StreamAppend};

/// Where an already appended event id lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdLocation {
    /// Its stream.
    pub stream: StreamId,
    /// Its global position.
    pub position: u64,
    /// Its stream version.
    pub version: u64,
}

/// What to do with an append.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Write the events at versions `current + 1 ..`.
    Write {
        /// The stream's version before the append.
        current: u64,
    },
    /// Every id is already in the stream: answer with the original placement.
    AlreadyAppended(AppendOutcome),
}

/// Checks an append, in this order: non-empty; every event belongs in the
/// stream; no id repeats within the batch; ids already in the log form an
/// idempotent retry or are refused; the expected version holds.
///
/// # Errors
/// The first failed check, as its [`StoreError`].
pub(crate) fn check_part<F>(
    stream: &StreamId,
    expected: ExpectedVersion,
    events: &[NewEvent],
    current: u64,
    mut locate: F,
) -> Result<Verdict, StoreError>
where
    F: FnMut(&EventId) -> Result<Option<IdLocation>, StoreError>,
{
    if events.is_empty() {
        return Err(StoreError::EmptyAppend);
    }
    if let Some(misplaced) = events.iter().find(|new| !new.event.belongs_in(stream)) {
        return Err(StoreError::MisplacedEvent {
            stream: *stream,
            event_type: misplaced.event.type_name(),
        });
    }
    let mut seen = HashSet::with_capacity(events.len());
    if let Some(repeated) = events.iter().find(|new| !seen.insert(new.event_id)) {
        return Err(StoreError::DuplicateEventId {
            event_id: repeated.event_id,
            reason: "repeated within one append",
        });
    }
    let mut found = Vec::new();
    for new in events {
        match locate(&new.event_id)? {
            Some(location) if location.stream != *stream => {
                return Err(StoreError::DuplicateEventId {
                    event_id: new.event_id,
                    reason: "already appended to another stream",
                });
            }
            Some(location) => found.push((new.event_id, location)),
            None => {}
        }
    }
    if let Some((event_id, _)) = found.first() {
        if found.len() != events.len() {
            return Err(StoreError::DuplicateEventId {
                event_id: *event_id,
                reason: "batch is only partly appended already",
            });
        }
        let positions = found.iter().map(|(_, location)| location.position);
        return Ok(Verdict::AlreadyAppended(AppendOutcome {
            first_position: positions.clone().min().unwrap_or(0),
            last_position: positions.max().unwrap_or(0),
            stream_version: found
                .iter()
                .map(|(_, location)| location.version)
                .max()
                .unwrap_or(0),
            deduplicated: true,
        }));
    }
    if !expected.admits(current) {
        return Err(StoreError::Conflict {
            stream: *stream,
            expected,
            actual: current,
        });
    }
    Ok(Verdict::Write { current })
}

/// What to do with an atomic multi-stream append.
#[derive(Debug, PartialEq, Eq)]
pub enum TransactionVerdict {
    /// Write every part; `currents[i]` is part `i`'s stream version before it.
    Write {
        /// Versions before the append, per part.
        currents: Vec<u64>,
    },
    /// Every part is already appended: answer with the original placements.
    AlreadyAppended(Vec<AppendOutcome>),
}

/// Checks an atomic append: at least one part, no stream twice, no event id
/// twice across parts, then every part with the per-part checks above. Either every part is
/// fresh, or every part is an idempotent retry; anything else is refused.
///
/// # Errors
/// The first failed check, as its [`StoreError`].
pub fn check_transaction<V, F>(
    parts: &[StreamAppend],
    mut version_of: V,
    mut locate: F,
) -> Result<TransactionVerdict, StoreError>
where
    V: FnMut(&StreamId) -> Result<u64, StoreError>,
    F: FnMut(&EventId) -> Result<Option<IdLocation>, StoreError>,
{
    if parts.is_empty() {
        return Err(StoreError::EmptyAppend);
    }
    let mut streams = HashSet::with_capacity(parts.len());
    if let Some(repeated) = parts.iter().find(|part| !streams.insert(part.stream)) {
        return Err(StoreError::RepeatedStream {
            stream: repeated.stream,
        });
    }
    if parts.len() > 1 {
        let mut ids = HashSet::new();
        if let Some(repeated) = parts
            .iter()
            .flat_map(|part| &part.events)
            .find(|new| !ids.insert(new.event_id))
        {
            return Err(StoreError::DuplicateEventId {
                event_id: repeated.event_id,
                reason: "repeated within one append",
            });
        }
    }
    let mut currents = Vec::with_capacity(parts.len());
    let mut retried = Vec::with_capacity(parts.len());
    for part in parts {
        let current = version_of(&part.stream)?;
        match check_part(
            &part.stream,
            part.expected,
            &part.events,
            current,
            &mut locate,
        )? {
            Verdict::Write { current } => currents.push(current),
            Verdict::AlreadyAppended(outcome) => retried.push(outcome),
        }
    }
    match (currents.is_empty(), retried.is_empty()) {
        (_, true) => Ok(TransactionVerdict::Write { currents }),
        (true, false) => Ok(TransactionVerdict::AlreadyAppended(retried)),
        (false, false) => Err(StoreError::DuplicateEventId {
            event_id: parts[0].events[0].event_id,
            reason: "atomic append is only partly appended already",
        }),
    }
}

/// Turns checked parts into records: positions from `first_position` on, in
/// part order, versions from each part's `current + 1`. Returns the records
/// and one outcome per part. The one place every backend numbers events.
///
/// # Errors
/// [`StoreError::NumberingExhausted`] when a position or version would pass
/// `u64::MAX` (only a damaged head or stream index gets there).
pub fn place(
    parts: Vec<StreamAppend>,
    currents: &[u64],
    first_position: u64,
    now: u64,
) -> Result<(Vec<RecordedEvent>, Vec<AppendOutcome>), StoreError> {
    let mut records = Vec::new();
    let mut outcomes = Vec::with_capacity(parts.len());
    // `next` is the position the next event gets; it may be one past
    // `u64::MAX` only once nothing is left to place.
    let mut next = Some(first_position);
    for (part, &current) in parts.into_iter().zip(currents) {
        let first = next.ok_or(exhausted("position", u64::MAX))?;
        let mut version = current;
        for new in part.events {
            let position = next.ok_or(exhausted("position", u64::MAX))?;
            version = version
                .checked_add(1)
                .ok_or(exhausted("stream version", version))?;
            records.push(new.into_record(position, part.stream, version, now));
            next = position.checked_add(1);
        }
        outcomes.push(AppendOutcome {
            first_position: first,
            last_position: records.last().map_or(first, |record| record.position),
            stream_version: version,
            deduplicated: false,
        });
    }
    Ok((records, outcomes))
}

fn exhausted(what: &'static str, value: u64) -> StoreError {
    StoreError::NumberingExhausted { what, value }
}

/// The position after `head`, where the next append starts.
///
/// # Errors
/// [`StoreError::NumberingExhausted`] when `head` is `u64::MAX`.
pub fn next_position(head: u64) -> Result<u64, StoreError> {
    head.checked_add(1).ok_or(exhausted("position", head))
}

/// Encodes placed records for storage, refusing any whose body is larger
/// than [`MAX_EVENT_BYTES`]. Both backends encode through here, before they
/// change anything, so an oversized event leaves the log untouched.
///
/// # Errors
/// [`StoreError::EventTooLarge`] for the first oversized record; an encoding
/// failure as [`StoreError::Io`].
pub fn encode_records(records: &[RecordedEvent]) -> Result<Vec<Vec<u8>>, StoreError> {
    records
        .iter()
        .map(|record| {
            let bytes = crate::record::encode(record)?;
            let body = subagent_core::record::body_len(&bytes);
            if body > MAX_EVENT_BYTES {
                return Err(StoreError::EventTooLarge {
                    event_type: record.event.type_name(),
                    bytes: body,
                    limit: MAX_EVENT_BYTES,
                });
            }
            Ok(bytes)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use subagent_core::{Event, SessionId};

    fn removed() -> NewEvent {
        NewEvent::new(Event::ProviderRemoved { name: "x".into() })
    }

    #[test]
    fn checks_run_in_order_and_name_the_culprit() {
        let runtime = StreamId::Runtime;
        let none = |_: &EventId| Ok(None);
        assert_eq!(
            check_part(&runtime, ExpectedVersion::Any, &[], 0, none),
            Err(StoreError::EmptyAppend)
        );

        let session = StreamId::Session(SessionId::new());
        assert!(matches!(
            check_part(&session, ExpectedVersion::Any, &[removed()], 0, none),
            Err(StoreError::MisplacedEvent {
                event_type: "ProviderRemoved",
                ..
            })
        ));

        let event = removed();
        assert!(matches!(
            check_part(
                &runtime,
                ExpectedVersion::Any,
                &[event.clone(), event],
                0,
                none
            ),
            Err(StoreError::DuplicateEventId {
                reason: "repeated within one append",
                ..
            })
        ));

        assert_eq!(
            check_part(&runtime, ExpectedVersion::Exact(2), &[removed()], 3, none),
            Err(StoreError::Conflict {
                stream: runtime,
                expected: ExpectedVersion::Exact(2),
                actual: 3
            })
        );
        assert_eq!(
            check_part(&runtime, ExpectedVersion::NoStream, &[removed()], 0, none),
            Ok(Verdict::Write { current: 0 })
        );
    }

    #[test]
    fn numbering_past_u64_max_is_refused_not_wrapped() {
        let runtime = StreamId::Runtime;
        let part = |events| StreamAppend {
            stream: runtime,
            expected: ExpectedVersion::Any,
            events,
        };
        assert_eq!(
            place(vec![part(vec![removed()])], &[u64::MAX], 1, 0).unwrap_err(),
            StoreError::NumberingExhausted {
                what: "stream version",
                value: u64::MAX
            }
        );
        // The last position may be u64::MAX; one more event may not.
        let (records, _) = place(vec![part(vec![removed()])], &[0], u64::MAX, 0).unwrap();
        assert_eq!(records[0].position, u64::MAX);
        assert!(matches!(
            place(vec![part(vec![removed(), removed()])], &[0], u64::MAX, 0),
            Err(StoreError::NumberingExhausted {
                what: "position",
                ..
            })
        ));
        assert_eq!(next_position(u64::MAX - 1), Ok(u64::MAX));
        assert_eq!(
            next_position(u64::MAX).unwrap_err().code(),
            subagent_core::ErrorCode::StoreNumberingExhausted
        );
    }

    #[test]
    fn a_full_retry_is_idempotent_and_a_partial_one_refused() {
        let runtime = StreamId::Runtime;
        let (first, second) = (removed(), removed());
        let known = first.event_id;
        let locate = |id: &EventId| {
            Ok((*id == known).then_some(IdLocation {
                stream: StreamId::Runtime,
                position: 7,
                version: 2,
            }))
        };
        assert_eq!(
            check_part(
                &runtime,
                ExpectedVersion::Exact(99),
                std::slice::from_ref(&first),
                5,
                locate
            ),
            Ok(Verdict::AlreadyAppended(AppendOutcome {
                first_position: 7,
                last_position: 7,
                stream_version: 2,
                deduplicated: true
            }))
        );
        for batch in [vec![first.clone(), second.clone()], vec![second, first]] {
            assert!(matches!(
                check_part(&runtime, ExpectedVersion::Any, &batch, 5, locate),
                Err(StoreError::DuplicateEventId {
                    reason: "batch is only partly appended already",
                    ..
                })
            ));
        }
    }
}
