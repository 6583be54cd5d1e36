//! Helpers shared by the replay crate's integration tests.
// Each test binary uses only some of them.
#![allow(dead_code)]

use serde_json::json;
use subagent_core::{AttachmentId, NewEvent, RecordedEvent};
use subagent_projections::testing::{history, Step};
use subagent_store::{EventLog, ExpectedVersion};

/// A current-thread tokio runtime for the async parts of a sync test.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `records` as export lines.
pub(crate) fn lines(records: &[RecordedEvent]) -> String {
    records
        .iter()
        .map(|r| serde_json::to_string(r).unwrap() + "\n")
        .collect()
}

/// Appends `records` as they are, one append each, bypassing import's
/// checks: what a log written by a faulty build would hold, and (one write-
/// ahead record per event) what a host's log looks like on disk.
pub(crate) fn append_raw<L: EventLog + ?Sized>(log: &L, records: &[RecordedEvent]) {
    runtime().block_on(async {
        for record in records {
            let new = NewEvent {
                event_id: record.event_id,
                correlation_id: record.correlation_id,
                causation_id: record.causation_id,
                trace: record.trace,
                event: record.event.clone(),
                recorded_at: Some(record.recorded_at),
            };
            log.append(
                record.stream,
                ExpectedVersion::Exact(record.version - 1),
                vec![new],
            )
            .await
            .unwrap();
        }
    });
}

/// A root with both providers, a worker that ran a turn and settled (its
/// notice in the root's inbox), a message to it, and an external grandchild.
pub(crate) fn sample() -> Vec<RecordedEvent> {
    let mut steps = vec![Step::Child {
        parent: 0,
        continuable: true,
    }];
    steps.extend(std::iter::repeat_n(Step::Advance { target: 1 }, 5));
    steps.push(Step::Message { target: 1 });
    steps.push(Step::Child {
        parent: 1,
        continuable: false,
    });
    history(&steps)
}

/// Bytes sniffed as a PNG image.
pub(crate) const PNG: &[u8] = b"\x89PNG\r\n\x1a\n not really, but sniffed as one";

/// [`subagent_projections::testing::history_with_image`] of [`PNG`].
pub(crate) fn history_with_image() -> (Vec<RecordedEvent>, AttachmentId) {
    subagent_projections::testing::history_with_image(PNG)
}

/// An export's line carrying `bytes` as attachment `id`.
pub(crate) fn attachment_line(id: &str, bytes: &[u8]) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
    format!("{}\n", json!({"attachment": id, "bytes": encoded}))
}
