use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::json;
use subagent_core::{ErrorCode, SessionId, StreamId};
use subagent_store::{EventLog, ExpectedVersion, MemoryLog, StreamAppend};

use super::*;

/// A whole 2x2 PNG.
const PNG: &[u8] = b"\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x02\x00\x00\x00\x02\x08\x02\x00\x00\x00\xfd\xd4\x9a\x73\x00\x00\x00\x12\x49\x44\x41\x54\x78\x9c\x63\xf8\xcf\xc0\xc0\x00\xc2\x0c\xff\x81\x00\x00\x1f\xee\x05\xfb\x0b\xd9\x68\x8b\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82";
/// A whole 1x1 GIF.
const GIF: &[u8] = b"\x47\x49\x46\x38\x39\x61\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff\x21\xf9\x04\x01\x00\x00\x00\x00\x2c\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x01\x44\x00\x3b";

fn image(json: serde_json::Value) -> ContentBlock {
    serde_json::from_value(json).unwrap()
}

fn inline(mime_type: &str, bytes: &[u8]) -> ContentBlock {
    image(json!({"type": "image", "mimeType": mime_type, "data": STANDARD.encode(bytes)}))
}

fn admit(content: Vec<ContentBlock>, log: &MemoryLog) -> Result<AdmittedContent, SubagentError> {
    admit_images(content, AttachmentLimits::DEFAULT, log)
}

fn refusal(result: Result<AdmittedContent, SubagentError>) -> String {
    match result {
        Err(SubagentError::AttachmentInvalid(why)) => why,
        other => panic!("expected attachment-invalid, got {other:?}"),
    }
}

/// Stores `bytes` in `log` the only way the blob store takes them: with an
/// event.
async fn store(log: &MemoryLog, bytes: &[u8]) -> AttachmentId {
    let attachment = Attachment::new(bytes.to_vec());
    let id = attachment.id();
    let event =
        subagent_core::NewEvent::new(subagent_core::Event::TurnStarted { turn: 1, epoch: 1 });
    log.append_with_attachments(
        vec![StreamAppend {
            stream: StreamId::Session(SessionId::new()),
            expected: ExpectedVersion::Any,
            events: vec![event],
        }],
        vec![attachment],
    )
    .await
    .unwrap();
    id
}

#[test]
fn an_inline_image_is_recorded_by_id_and_its_bytes_kept_once() {
    let log = MemoryLog::new();
    let mut png = inline("image/png", PNG);
    if let ContentBlock::Image(block) = &mut png {
        block.extra.insert("alt".into(), json!("a chart"));
    }
    let admitted = admit(vec![ContentBlock::text("look"), png.clone(), png], &log).unwrap();
    let id = AttachmentId::of(PNG);
    assert_eq!(admitted.content[0], ContentBlock::text("look"));
    for block in &admitted.content[1..] {
        let ContentBlock::Image(block) = block else {
            panic!("{block:?}")
        };
        assert_eq!(block.data, None);
        assert_eq!(block.attachment.as_deref(), Some(id.to_string().as_str()));
        assert_eq!(block.mime_type, "image/png");
        assert_eq!(block.extra.get("alt"), Some(&json!("a chart")));
    }
    assert_eq!(admitted.attachments, vec![Attachment::new(PNG.to_vec())]);
    assert!(admitted.has_images());
    // Admission reads; it never writes.
    assert_eq!(log.attachment_ids().unwrap(), Vec::new());
}

#[test]
fn text_alone_passes_unchanged() {
    let content = vec![ContentBlock::text("a"), ContentBlock::text("b")];
    let admitted = admit(content.clone(), &MemoryLog::new()).unwrap();
    assert_eq!(admitted.content, content);
    assert!(admitted.attachments.is_empty());
    assert!(!admitted.has_images());
}

#[test]
fn the_declared_type_must_be_the_sniffed_one() {
    let log = MemoryLog::new();
    let why = refusal(admit(vec![inline("image/jpeg", PNG)], &log));
    assert!(
        why.contains("declared \"image/jpeg\", but the bytes are image/png"),
        "{why}"
    );
    let why = refusal(admit(vec![inline("image/jpg", PNG)], &log));
    assert!(why.contains("but the bytes are image/png"), "{why}");
    let why = refusal(admit(
        vec![ContentBlock::text("x"), inline("image/png", b"<svg/>")],
        &log,
    ));
    assert!(why.starts_with("part 1: "), "{why}");
    assert!(why.contains("not a PNG, JPEG, GIF or WebP"), "{why}");
}

#[test]
fn malformed_parts_are_refused() {
    let log = MemoryLog::new();
    let id = AttachmentId::of(PNG).to_string();
    for (part, expected) in [
        (
            json!({"type": "image", "mimeType": "image/png", "data": "not base64!"}),
            "not base64",
        ),
        (
            json!({"type": "image", "mimeType": "image/png", "data": STANDARD.encode(PNG), "attachment": id}),
            "not both",
        ),
        (
            json!({"type": "image", "mimeType": "image/png"}),
            "carries `data` or names an `attachment`",
        ),
        (
            json!({"type": "image", "mimeType": "image/png", "attachment": "sha256:beef"}),
            "64 lowercase hex digits",
        ),
        (
            json!({"type": "image", "mimeType": "image/png", "attachment": id}),
            "is stored",
        ),
    ] {
        let why = refusal(admit(vec![image(part)], &log));
        assert!(why.contains(expected), "{why} lacks {expected:?}");
    }
}

#[test]
fn images_over_a_cap_are_refused() {
    let log = MemoryLog::new();
    assert_eq!((PNG.len(), GIF.len()), (75, 42));
    let limits = AttachmentLimits {
        // Not a multiple of 3, so one byte over still passes the base64
        // length check and is refused once decoded.
        per_image: 76,
        per_request: 117,
    };
    // Far over: refused before decoding.
    let why = refusal(admit_images(
        vec![inline("image/png", &[PNG, &[0u8; 4096][..]].concat())],
        limits,
        &log,
    ));
    assert!(why.contains("over the 76 byte cap"), "{why}");
    // Just over once decoded (the base64 alone does not show it).
    let why = refusal(admit_images(
        vec![inline("image/png", &[PNG, &[0u8; 2][..]].concat())],
        limits,
        &log,
    ));
    assert!(why.contains("77 bytes, over the 76 byte cap"), "{why}");
    // Each within its cap, together over the request's.
    let content = vec![
        inline("image/png", PNG),
        inline("image/gif", GIF),
        inline("image/gif", GIF),
    ];
    let why = refusal(admit_images(content, limits, &log));
    assert!(
        why.contains("over the 117 byte cap of one request"),
        "{why}"
    );
    // At the caps exactly: admitted.
    let content = vec![inline("image/png", PNG), inline("image/gif", GIF)];
    assert_eq!(
        admit_images(content, limits, &log)
            .unwrap()
            .attachments
            .len(),
        2
    );
}

#[test]
fn an_image_cut_short_is_refused_and_nothing_is_kept_to_store() {
    let log = MemoryLog::new();
    // After the header (33), into the image data (37), before the end
    // chunk (63): each loses pixels.
    for cut in [33, 37, 63] {
        let why = refusal(admit(vec![inline("image/png", &PNG[..cut])], &log));
        assert!(
            why.contains("the bytes start as image/png but are not a whole image of it"),
            "{cut}: {why}"
        );
    }
    let why = refusal(admit(vec![inline("image/gif", &GIF[..30])], &log));
    assert!(why.contains("not a whole image"), "{why}");
}

#[tokio::test]
async fn a_stored_attachment_may_be_named_instead_of_sent_again() {
    let log = MemoryLog::new();
    let id = store(&log, GIF).await;
    let named =
        image(json!({"type": "image", "mimeType": "image/gif", "attachment": id.to_string()}));
    let admitted = admit(vec![named], &log).unwrap();
    assert!(admitted.attachments.is_empty(), "nothing new to store");
    assert_eq!(admitted.content.len(), 1);
    // The stored bytes face the same type check.
    let mislabelled =
        image(json!({"type": "image", "mimeType": "image/png", "attachment": id.to_string()}));
    let why = refusal(admit(vec![mislabelled], &log));
    assert!(why.contains("the bytes are image/gif"), "{why}");
}

#[tokio::test]
async fn an_agent_gets_the_bytes_back_beside_the_id() {
    let log = MemoryLog::new();
    let id = store(&log, PNG).await;
    let mut content = vec![
        ContentBlock::text("see"),
        image(json!({"type": "image", "mimeType": "image/png", "attachment": id.to_string()})),
    ];
    inline_attachments(&mut content, &log).unwrap();
    let ContentBlock::Image(block) = &content[1] else {
        panic!("{content:?}")
    };
    assert_eq!(
        STANDARD.decode(block.data.as_deref().unwrap()).unwrap(),
        PNG
    );
    assert_eq!(block.attachment.as_deref(), Some(id.to_string().as_str()));

    let lost = AttachmentId::of(b"lost");
    let mut content = vec![image(
        json!({"type": "image", "mimeType": "image/png", "attachment": lost.to_string()}),
    )];
    let err = inline_attachments(&mut content, &log).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Internal);
    assert!(log.corrupt_attachment(&id));
    let mut content = vec![image(
        json!({"type": "image", "mimeType": "image/png", "attachment": id.to_string()}),
    )];
    let err = inline_attachments(&mut content, &log).unwrap_err();
    assert!(err.to_string().contains("no longer hashes"), "{err}");
}
