//! Attachments through `export` and `import`: each travels once as its own
//! line before the first record that names it, is checked against its id,
//! and is stored with that record; every malformed or misplaced attachment
//! line is refused at its line.

mod common;

use common::{attachment_line, history_with_image as history, lines, runtime, PNG};
use serde_json::json;
use subagent_core::{AttachmentId, ErrorCode, RecordedEvent};
use subagent_replay::{export, import, ReplayError};
use subagent_store::{EventLog, MemoryLog};

/// The export of `records` with `inserted` placed before the record at
/// index `before` (and after the last one when `before` is past the end).
fn export_with(records: &[RecordedEvent], before: usize, inserted: &str) -> String {
    let mut text = lines(&records[..before.min(records.len())]);
    text.push_str(inserted);
    text.push_str(&lines(&records[before.min(records.len())..]));
    text
}

fn import_text(text: &str) -> (MemoryLog, Result<u64, ReplayError>) {
    let log = MemoryLog::new();
    let result = runtime().block_on(import(&log, std::io::Cursor::new(text.to_owned())));
    (log, result)
}

#[test]
fn an_attachment_round_trips_once_before_the_record_that_names_it() {
    let (records, id) = history();
    let prompt_at = records.len() - 1;
    let text = export_with(&records, prompt_at, &attachment_line(&id.to_string(), PNG));
    let (log, imported) = import_text(&text);
    assert_eq!(imported.unwrap(), records.len() as u64);
    assert_eq!(log.attachment(&id).unwrap().as_deref(), Some(PNG));
    let mut again = Vec::new();
    export(&log, &mut again).unwrap();
    assert_eq!(String::from_utf8(again).unwrap(), text);
}

#[test]
fn every_bad_attachment_line_is_refused_at_its_line() {
    let (records, id) = history();
    let prompt_at = records.len() - 1;
    // Line numbers are 1-based; an inserted line before index i is line i + 1.
    let good = attachment_line(&id.to_string(), PNG);
    let cases: Vec<(&str, String, usize, &str)> = vec![
        (
            "bytes that hash elsewhere",
            export_with(
                &records,
                prompt_at,
                &attachment_line(&id.to_string(), b"other"),
            ),
            prompt_at + 1,
            "hash to",
        ),
        (
            "no attachment line",
            lines(&records),
            prompt_at + 1,
            "which no line before it carries",
        ),
        (
            "the line after the record",
            export_with(&records, records.len(), &good),
            prompt_at + 1,
            "which no line before it carries",
        ),
        (
            "carried twice",
            export_with(&records, prompt_at, &format!("{good}{good}")),
            prompt_at + 2,
            "carried twice",
        ),
        (
            "bytes not base64",
            export_with(
                &records,
                prompt_at,
                &format!(
                    "{}\n",
                    json!({"attachment": id.to_string(), "bytes": "%%%"})
                ),
            ),
            prompt_at + 1,
            "not base64",
        ),
        (
            "an unknown field",
            export_with(
                &records,
                prompt_at,
                &format!(
                    "{}\n",
                    json!({"attachment": id.to_string(), "bytes": "", "x": 1})
                ),
            ),
            prompt_at + 1,
            "not an attachment line",
        ),
        (
            "an id that is not an address",
            export_with(&records, prompt_at, &attachment_line("sha256:beef", PNG)),
            prompt_at + 1,
            "not an attachment line",
        ),
    ];
    for (name, text, line, expected) in cases {
        let (_, result) = import_text(&text);
        match result {
            Err(err @ ReplayError::BadImport { .. }) => {
                assert_eq!(err.code(), ErrorCode::ReplayBadImport);
                let ReplayError::BadImport { line: at, reason } = err else {
                    unreachable!()
                };
                assert_eq!(at, line, "{name}: {reason}");
                assert!(reason.contains(expected), "{name}: {reason}");
            }
            other => panic!("{name}: expected a bad import, got {other:?}"),
        }
    }
    // An attachment no record names, at the end: refused at its own line.
    let orphan = AttachmentId::of(b"GIF89a orphan");
    let text = export_with(&records, prompt_at, &good)
        + &attachment_line(&orphan.to_string(), b"GIF89a orphan");
    let (_, result) = import_text(&text);
    match result {
        Err(ReplayError::BadImport { line, reason }) => {
            assert_eq!(line, records.len() + 2, "{reason}");
            assert!(reason.contains("named by no record after it"), "{reason}");
        }
        other => panic!("expected a bad import, got {other:?}"),
    }
}

#[test]
fn exporting_a_log_that_lost_an_attachment_is_an_error_not_a_silent_gap() {
    let (records, _) = history();
    let log = MemoryLog::new();
    common::append_raw(&log, &records);
    let err = export(&log, &mut Vec::new()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::StoreDamaged);
    assert!(err.to_string().contains("does not hold"), "{err}");
}

#[test]
fn verify_reports_an_attachment_missing_or_damaged_and_passes_an_intact_one() {
    let (records, id) = history();
    let text = export_with(
        &records,
        records.len() - 1,
        &attachment_line(&id.to_string(), PNG),
    );
    let (log, imported) = import_text(&text);
    imported.unwrap();
    let report = subagent_replay::verify(&log).unwrap();
    assert!(report.is_ok(), "{report:?}");

    assert!(log.corrupt_attachment(&id));
    let report = subagent_replay::verify(&log).unwrap();
    assert!(!report.is_ok());
    assert_eq!(report.attachment_problems.len(), 1, "{report:?}");
    assert!(
        report.attachment_problems[0].contains("no longer hashes"),
        "{report:?}"
    );

    let lost = MemoryLog::new();
    common::append_raw(&lost, &records);
    let report = subagent_replay::verify(&lost).unwrap();
    assert_eq!(
        report.attachment_problems,
        vec![format!(
            "attachment {id}, named at position {}, is not in the blob store",
            records.len()
        )]
    );
    assert!(!report.is_ok());
}
