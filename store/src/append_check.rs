//! Append checks: what every backend checks, in the same order, before
//! it writes anything. Public so a backend in another crate (`subagent-pg`)
//! runs exactly these checks, numbering and encoding, not a copy of them. Pure: the backend supplies the stream's version and an
//! event-id lookup, and gets back a verdict. Then [`place`] numbers the
//! checked events (checked: a damaged head or stream index cannot wrap a
//! number) and [`encode_records`] encodes them, refusing an event larger
//! than [`MAX_EVENT_BYTES`].

use std::collections::HashSet;
use std::hash::Hash;

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
    if let Some(repeated) = first_repeated(events.iter().map(|new| &new.event_id), events.len()) {
        return Err(StoreError::DuplicateEventId {
            event_id: *repeated,
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

/// Up to how many items [`first_repeated`] compares pairwise.
const PAIRWISE_MAX: usize = 16;

/// The first of the `count` `items` equal to an earlier one. An append
/// holds one or a few events, so up to [`PAIRWISE_MAX`] items are compared
/// pairwise, with no allocation and no hashing; more go through a set.
fn first_repeated<I>(items: I, count: usize) -> Option<I::Item>
where
    I: Iterator + Clone,
    I::Item: Eq + Hash + Copy,
{
    if count <= PAIRWISE_MAX {
        let earlier = items.clone();
        items
            .enumerate()
            .find(|(index, item)| earlier.clone().take(*index).any(|seen| seen == *item))
            .map(|(_, item)| item)
    } else {
        let mut seen = HashSet::with_capacity(count);
        items.into_iter().find(|item| !seen.insert(*item))
    }
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
    if let Some(repeated) = first_repeated(parts.iter().map(|part| &part.stream), parts.len()) {
        return Err(StoreError::RepeatedStream { stream: *repeated });
    }
    if parts.len() > 1 {
        let ids = parts
            .iter()
            .flat_map(|part| &part.events)
            .map(|new| &new.event_id);
        let count = parts.iter().map(|part| part.events.len()).sum();
        if let Some(repeated) = first_repeated(ids, count) {
            return Err(StoreError::DuplicateEventId {
                event_id: *repeated,
                reason: "repeated within one append",
            });
        }
    }
    let mut currents = Vec::with_capacity(parts.len());
    // Retries are rare: no allocation until one is found.
    let mut retried = Vec::new();
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
    let mut records = Vec::with_capacity(parts.iter().map(|part| part.events.len()).sum());
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
            let mut bytes = Vec::new();
            encode_checked(record, &mut bytes)?;
            Ok(bytes)
        })
        .collect()
}

/// Placed records encoded back to back into one buffer that outlives
/// them: what [`encode_records`] returns, for a writer that encodes
/// group after group and should not allocate for each record. The same
/// encoding and the same size rule.
#[derive(Default)]
pub struct EncodedRecords {
    /// The records' bytes, one after another.
    bytes: Vec<u8>,
    /// Where each record ends in `bytes`.
    ends: Vec<usize>,
}

/// The most bytes [`EncodedRecords`] keeps allocated between encodings:
/// a rare large transaction does not pin its size for the log's life.
pub(crate) const RETAINED_ENCODED_BYTES: usize = 256 * 1024;

impl EncodedRecords {
    /// Encodes `records` in place of what was encoded before.
    ///
    /// # Errors
    /// As [`encode_records`]; nothing is then held.
    pub fn encode(&mut self, records: &[RecordedEvent]) -> Result<(), StoreError> {
        self.clear();
        for record in records {
            if let Err(err) = encode_checked(record, &mut self.bytes) {
                self.clear();
                return Err(err);
            }
            self.ends.push(self.bytes.len());
        }
        Ok(())
    }

    /// The bytes held for encodings to come (the writer's test of what a
    /// group leaves behind).
    #[cfg(test)]
    #[must_use]
    pub(crate) fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    /// Each record's bytes, in the order they were encoded.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, &end)| &self.bytes[start..end])
    }

    /// Forgets what was encoded, and lets go of an unusually large buffer.
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        if self.bytes.capacity() > RETAINED_ENCODED_BYTES {
            self.bytes = Vec::new();
        }
    }
}

/// Appends `record`'s encoding to `out`, or refuses it as too large (then
/// `out` is as it was): the one place the size rule is applied.
fn encode_checked(record: &RecordedEvent, out: &mut Vec<u8>) -> Result<(), StoreError> {
    let start = subagent_core::record::encode_into(record, out)?;
    let body = subagent_core::record::body_len(&out[start..]);
    if body > MAX_EVENT_BYTES {
        out.truncate(start);
        return Err(StoreError::EventTooLarge {
            event_type: record.event.type_name(),
            bytes: body,
            limit: MAX_EVENT_BYTES,
        });
    }
    Ok(())
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

    /// Both ways of finding a repeat (pairwise for a few items, a set for
    /// more) name the same culprit: the first item equal to an earlier one,
    /// wherever the two stand, and nothing when every item is distinct.
    #[test]
    fn a_repeat_is_named_alike_pairwise_and_through_a_set() {
        for count in [1, 2, 3, PAIRWISE_MAX, PAIRWISE_MAX + 1, 40] {
            let ids: Vec<EventId> = (0..count).map(|_| EventId::new()).collect();
            assert_eq!(first_repeated(ids.iter(), count), None, "{count} distinct");
            for later in 1..count {
                for earlier in 0..later {
                    let mut repeated = ids.clone();
                    repeated[later] = repeated[earlier];
                    // A second repeat after the first is not the one named.
                    if later + 1 < count {
                        repeated[count - 1] = repeated[later - 1];
                    }
                    assert_eq!(
                        first_repeated(repeated.iter(), count),
                        Some(&repeated[later]),
                        "{count} items, item {later} repeats item {earlier}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_stream_twice_or_an_id_in_two_parts_is_refused() {
        let runtime = StreamId::Runtime;
        let part = |stream, events| StreamAppend {
            stream,
            expected: ExpectedVersion::Any,
            events,
        };
        let none = |_: &EventId| Ok(None);
        let versions = |_: &StreamId| Ok(0);
        assert_eq!(
            check_transaction(
                &[
                    part(runtime, vec![removed()]),
                    part(runtime, vec![removed()])
                ],
                versions,
                none
            ),
            Err(StoreError::RepeatedStream { stream: runtime })
        );
        let session = StreamId::Session(SessionId::new());
        let shared = NewEvent::new(Event::TurnStarted { turn: 1, epoch: 1 });
        let mut many: Vec<NewEvent> = (0..PAIRWISE_MAX)
            .map(|turn| {
                NewEvent::new(Event::TurnStarted {
                    turn: turn as u64,
                    epoch: 1,
                })
            })
            .collect();
        many.push(shared.clone());
        let other = StreamId::Session(SessionId::new());
        for first in [vec![shared.clone()], many] {
            assert_eq!(
                check_transaction(
                    &[part(session, first), part(other, vec![shared.clone()])],
                    versions,
                    none
                ),
                Err(StoreError::DuplicateEventId {
                    event_id: shared.event_id,
                    reason: "repeated within one append"
                })
            );
        }
    }

    fn placed(names: &[usize]) -> Vec<RecordedEvent> {
        let events = names
            .iter()
            .map(|&len| {
                NewEvent::new(Event::ProviderRemoved {
                    name: "n".repeat(len),
                })
            })
            .collect();
        let part = StreamAppend {
            stream: StreamId::Runtime,
            expected: ExpectedVersion::Any,
            events,
        };
        place(vec![part], &[0], 1, 7).unwrap().0
    }

    #[test]
    fn reused_encodings_equal_fresh_ones_and_hold_only_the_last_records() {
        let mut encoded = EncodedRecords::default();
        // A large record first, then smaller ones: nothing of an earlier
        // encoding may show through a later one.
        for lengths in [vec![300 * 1024], vec![600, 3], vec![40]] {
            let records = placed(&lengths);
            encoded.encode(&records).unwrap();
            let reused: Vec<&[u8]> = encoded.iter().collect();
            let fresh = encode_records(&records).unwrap();
            assert_eq!(reused, fresh.iter().map(Vec::as_slice).collect::<Vec<_>>());
            let large = lengths[0] > RETAINED_ENCODED_BYTES;
            assert_eq!(
                encoded.bytes.capacity() > RETAINED_ENCODED_BYTES,
                large,
                "a large buffer is let go before the next encoding"
            );
        }
    }

    #[test]
    fn an_oversized_record_is_refused_alike_and_nothing_is_held() {
        let records = placed(&[10, MAX_EVENT_BYTES, 10]);
        let fresh = encode_records(&records).unwrap_err();
        assert!(matches!(
            fresh,
            StoreError::EventTooLarge {
                event_type: "ProviderRemoved",
                limit: MAX_EVENT_BYTES,
                ..
            }
        ));
        let mut encoded = EncodedRecords::default();
        encoded.encode(&placed(&[5])).unwrap();
        assert_eq!(encoded.encode(&records), Err(fresh));
        assert_eq!(encoded.iter().count(), 0);
        assert!(encoded.bytes.is_empty());
    }
}
