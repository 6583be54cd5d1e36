//! The blob store: attachments become durable with the events that refer
//! to them, or not at all.

use subagent_core::{Attachment, AttachmentId, ErrorCode};

use crate::log::{EventLog, ExpectedVersion};

use super::atomic::part;
use super::{session_stream, turn, Harness};

/// An attachment is stored by the append that carries it, readable by its
/// id, listed once however often it is stored, and kept across a reopen;
/// a refused append and a deduplicated retry store nothing.
pub async fn attachments_are_stored_with_their_events_or_not_at_all<H: Harness>(mut harness: H) {
    let log = harness.open();
    let stream = session_stream();
    let (kept, refused, retried) = (
        Attachment::new(b"\x89PNG\r\n\x1a\nkept".to_vec()),
        Attachment::new(b"GIF89a refused".to_vec()),
        Attachment::new(b"\xff\xd8\xff retried".to_vec()),
    );
    let first = turn(1);
    log.append_with_attachments(
        vec![part(stream, ExpectedVersion::NoStream, vec![first.clone()])],
        vec![kept.clone()],
    )
    .await
    .unwrap();
    assert_eq!(
        log.attachment(&kept.id()).unwrap().as_deref(),
        Some(kept.bytes())
    );

    let err = log
        .append_with_attachments(
            vec![part(stream, ExpectedVersion::NoStream, vec![turn(2)])],
            vec![refused.clone()],
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::StoreConflict);
    assert_eq!(log.attachment(&refused.id()).unwrap(), None);

    let outcomes = log
        .append_with_attachments(
            vec![part(stream, ExpectedVersion::Any, vec![first])],
            vec![retried.clone()],
        )
        .await
        .unwrap();
    assert!(outcomes[0].deduplicated);
    assert_eq!(log.attachment(&retried.id()).unwrap(), None);

    log.append_with_attachments(
        vec![part(stream, ExpectedVersion::Exact(1), vec![turn(3)])],
        vec![kept.clone()],
    )
    .await
    .unwrap();
    assert_eq!(log.attachment_ids().unwrap(), vec![kept.id()]);
    assert_eq!(
        log.attachment(&AttachmentId::of(b"never stored")).unwrap(),
        None
    );

    let log = harness.reopen(log);
    assert_eq!(
        log.attachment(&kept.id()).unwrap().as_deref(),
        Some(kept.bytes())
    );
    assert_eq!(log.attachment_ids().unwrap(), vec![kept.id()]);
}
