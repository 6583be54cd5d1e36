//! Unit tests of `event`, beside it so the module stays short: stream ids
//! and type names, and every event and content block round-tripping
//! through JSON.

use super::*;
use std::collections::HashSet;

#[test]
fn stream_ids_round_trip_through_text() {
    let session = SessionId::new();
    let host = HostId::new();
    for stream in [
        StreamId::Runtime,
        StreamId::Session(session),
        StreamId::Host(host),
    ] {
        let text = stream.to_string();
        assert_eq!(text.parse::<StreamId>().unwrap(), stream);
        assert_eq!(serde_json::to_value(stream).unwrap(), Value::String(text));
    }
    assert_eq!(
        StreamId::Session(session).to_string(),
        format!("session-{session}")
    );
    assert_eq!(StreamId::Host(host).to_string(), format!("host-{host}"));
    assert_eq!(StreamId::Runtime.to_string(), "runtime");
    assert_eq!(
        serde_json::to_string(&StreamId::Runtime).unwrap(),
        "\"runtime\""
    );
}

#[test]
fn malformed_stream_names_are_bad_requests() {
    for bad in [
        "",
        "runtimes",
        "session-",
        "session-xyz",
        "other-1",
        "host-",
        "host-xyz",
        "Host-0190d3f4-0000-7000-8000-000000000000",
    ] {
        let err = bad.parse::<StreamId>().unwrap_err();
        assert_eq!(err.code().as_str(), "gateway/bad-request", "{bad:?}");
    }
}

#[test]
fn type_names_cover_every_variant_once() {
    let distinct: HashSet<&str> = EventKind::ALL.iter().map(|kind| kind.as_str()).collect();
    assert_eq!(distinct.len(), EventKind::ALL.len());
}

#[test]
fn events_know_their_stream() {
    let session = SessionId::new();
    let created = Event::SessionCreated {
        session,
        parent: None,
        depth: 0,
        label: "root".into(),
        provider: None,
        mode: SessionMode::Continuable,
        external: false,
        descriptor: Value::Null,
    };
    assert!(created.belongs_in(&StreamId::Session(session)));
    assert!(!created.belongs_in(&StreamId::Session(SessionId::new())));
    assert!(!created.belongs_in(&StreamId::Runtime));
    let removed = Event::ProviderRemoved { name: "x".into() };
    assert!(removed.belongs_in(&StreamId::Runtime));
    assert!(removed.belongs_in(&StreamId::Host(HostId::new())));
    assert!(!removed.belongs_in(&StreamId::Session(session)));
    let acquired = Event::TreeAcquired {
        host: HostId::new(),
        holder: "host-a".into(),
        fence: 1,
    };
    assert!(acquired.belongs_in(&StreamId::Session(session)));
    assert!(!acquired.belongs_in(&StreamId::Runtime));
    assert!(!acquired.belongs_in(&StreamId::Host(HostId::new())));
}

use crate::arbitrary;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_event_round_trips_through_json(event in arbitrary::event()) {
        let json = serde_json::to_string(&event).unwrap();
        let back: Event = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(&back, &event);
        prop_assert!(EventKind::ALL.contains(&event.kind()));
        let tagged: Value = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(tagged["type"].as_str(), Some(event.type_name()));
    }

    #[test]
    fn every_content_block_round_trips(block in arbitrary::content_block()) {
        let json = serde_json::to_value(&block).unwrap();
        let back: ContentBlock = serde_json::from_value(json.clone()).unwrap();
        prop_assert_eq!(&back, &block);
        prop_assert_eq!(serde_json::to_value(&back).unwrap(), json);
    }
}
