//! The stream and event-id indexes against the records.

use std::collections::BTreeSet;

use subagent_core::RecordedEvent;

use crate::append_check::IdLocation;
use crate::indexes::{IndexDamage, IndexEntry, LogIndex};
use crate::log::{EventLog, ExpectedVersion};

use super::atomic::part;
use super::{append, everything, session_stream, turn, Harness};

pub(super) fn stored_entries<L: EventLog>(log: &L, index: LogIndex) -> BTreeSet<String> {
    log.index_entries(index)
        .map(|entry| format!("{:?}", entry.expect("index entry decodes")))
        .collect()
}

pub(super) fn derived_entries(records: &[RecordedEvent], index: LogIndex) -> BTreeSet<String> {
    records
        .iter()
        .map(|record| {
            let entry = match index {
                LogIndex::Streams => IndexEntry::Stream {
                    stream: record.stream,
                    version: record.version,
                    position: record.position,
                },
                LogIndex::EventIds => IndexEntry::EventId {
                    event_id: record.event_id,
                    location: IdLocation {
                        stream: record.stream,
                        position: record.position,
                        version: record.version,
                    },
                },
            };
            format!("{entry:?}")
        })
        .collect()
}

/// The indexes hold exactly one stream entry and one event-id entry per
/// record, pointing back at it; lookups agree; and the listing shows the
/// entries as stored, so a damaged entry is visible to `verify`.
pub async fn index_entries_point_back_at_every_record<H: Harness>(mut harness: H) {
    let log = harness.open();
    let (a, b) = (session_stream(), session_stream());
    append(&log, a, ExpectedVersion::Any, vec![turn(1), turn(2)])
        .await
        .unwrap();
    log.append_atomic(vec![
        part(b, ExpectedVersion::Any, vec![turn(3)]),
        part(a, ExpectedVersion::Any, vec![turn(4)]),
    ])
    .await
    .unwrap();
    let log = harness.reopen(log);
    let records = everything(&log);
    for index in [LogIndex::Streams, LogIndex::EventIds] {
        assert_eq!(
            stored_entries(&log, index),
            derived_entries(&records, index)
        );
    }
    for record in &records {
        assert_eq!(
            log.indexed_position(&record.stream, record.version)
                .unwrap(),
            Some(record.position)
        );
        assert_eq!(
            log.locate_event(&record.event_id).unwrap(),
            Some(IdLocation {
                stream: record.stream,
                position: record.position,
                version: record.version
            })
        );
    }
    assert_eq!(log.indexed_position(&a, 4).unwrap(), None);
    assert_eq!(log.indexed_position(&a, 0).unwrap(), None);
    assert_eq!(log.locate_event(&turn(9).event_id).unwrap(), None);

    // Damage: redirect a's version 1, add a version 4 to b, forget the last
    // record's id, and add an id no record has.
    let stranger = turn(9).event_id;
    let last = records.last().unwrap();
    for damage in [
        IndexDamage::Stream {
            stream: a,
            version: 1,
            position: Some(3),
        },
        IndexDamage::Stream {
            stream: b,
            version: 2,
            position: Some(1),
        },
        IndexDamage::EventId {
            event_id: last.event_id,
            location: None,
        },
        IndexDamage::EventId {
            event_id: stranger,
            location: Some(IdLocation {
                stream: a,
                position: 2,
                version: 2,
            }),
        },
    ] {
        assert!(harness.damage_index(&log, damage.clone()), "{damage:?}");
    }
    assert_eq!(log.indexed_position(&a, 1).unwrap(), Some(3));
    assert_eq!(log.indexed_position(&b, 2).unwrap(), Some(1));
    assert_eq!(log.locate_event(&last.event_id).unwrap(), None);
    let streams = stored_entries(&log, LogIndex::Streams);
    assert_eq!(streams.len(), records.len() + 1);
    assert!(streams.contains(&format!(
        "{:?}",
        IndexEntry::Stream {
            stream: a,
            version: 1,
            position: 3
        }
    )));
    let ids = stored_entries(&log, LogIndex::EventIds);
    assert_eq!(ids.len(), records.len());
    assert!(ids
        .iter()
        .any(|entry| entry.contains(&stranger.to_string())));
    assert!(!ids
        .iter()
        .any(|entry| entry.contains(&last.event_id.to_string())));
}
