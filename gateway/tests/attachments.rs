//! Image prompts over real HTTP on 127.0.0.1: an image is stored once by
//! its SHA-256, recorded by id, handed to the child with its bytes, and
//! served back by `GET /v1/attachments/{id}`; every refusal stores nothing
//! and records nothing.

mod common;

use common::{count, has, prompt, Server};
use serde_json::{json, Value};
use subagent_core::{AttachmentId, AttachmentLimits};
use subagent_gateway::Limits;
use subagent_runtime::CapacityLimits;

/// A real 2x2 RGB PNG (75 bytes).
const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEklEQVR4nGP4z8DAAMIM/4EAAB/uBfsL2WiLAAAAAElFTkSuQmCC";

fn png() -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(PNG_BASE64)
        .unwrap()
}

fn image(mime_type: &str, data: &str) -> Value {
    json!({"type": "image", "mimeType": mime_type, "data": data})
}

/// A prompt of `text` and `images` from `parent` to `child`.
fn image_prompt(child: &str, parent: &str, request_id: &str, images: Vec<Value>) -> Value {
    let mut body = prompt(child, parent, request_id, "what is this?");
    body["content"].as_array_mut().unwrap().extend(images);
    body
}

/// A child labelled `label` that finished its first turn, and its root.
async fn settled(server: &Server, label: &str) -> (String, String) {
    let root = server.open_root().await;
    let child = server.start_child(&root, label).await;
    server
        .until_transcript(&child, "the first turn", |records| {
            has(records, "TurnEnded")
        })
        .await;
    (root, child)
}

#[tokio::test]
async fn an_image_is_stored_once_recorded_by_id_seen_by_the_child_and_served_back() {
    let server = Server::start().await;
    let (root, child) = settled(&server, "eyes").await;
    let id = AttachmentId::of(&png()).to_string();

    let body = image_prompt(&child, &root, "img-1", vec![image("image/png", PNG_BASE64)]);
    let (status, receipt) = server.post("/v1/prompt", &body).await;
    assert_eq!(status, 200, "{receipt}");
    let records = server
        .until_transcript(&child, "the image turn", |records| {
            count(records, "TurnEnded") == 2
        })
        .await;
    let accepted = records
        .iter()
        .find(|record| record["event"]["data"]["messageId"] == receipt["messageId"])
        .expect("the prompt is in the child's stream");
    assert_eq!(
        accepted["event"]["data"]["content"][1],
        json!({"type": "image", "mimeType": "image/png", "attachment": id}),
        "the event names the bytes and does not carry them"
    );
    let said: Vec<&str> = records
        .iter()
        .filter(|record| record["event"]["type"] == "AssistantMessage")
        .filter_map(|record| record["event"]["data"]["content"][0]["text"].as_str())
        .collect();
    assert_eq!(
        said.last().copied(),
        Some(format!("I was given [\"what is this?\"; image/png (75 bytes, {id})]").as_str()),
        "the child received the bytes, not only the id"
    );

    // Served back: the same bytes, their sniffed type, never re-sniffed.
    let response = server
        .request(reqwest::Method::GET, &format!("/v1/attachments/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let header = |name: &str| response.headers()[name].to_str().unwrap().to_owned();
    assert_eq!(header("content-type"), "image/png");
    assert_eq!(header("x-content-type-options"), "nosniff");
    assert!(header("cache-control").contains("immutable"));
    assert_eq!(response.bytes().await.unwrap().to_vec(), png());

    // A retry sends the bytes again: the first receipt, nothing new.
    let head = server.head();
    let (status, again) = server.post("/v1/prompt", &body).await;
    assert_eq!((status, &again), (200, &receipt));
    assert_eq!(server.head(), head);

    // A later prompt may name the stored image instead of sending it.
    let named = image_prompt(
        &child,
        &root,
        "img-2",
        vec![json!({"type": "image", "mimeType": "image/png", "attachment": id})],
    );
    let (status, second) = server.post("/v1/prompt", &named).await;
    assert_eq!(status, 200, "{second}");
    assert_ne!(second, receipt);
    let records = server
        .until_transcript(&child, "the named-image turn", |records| {
            count(records, "TurnEnded") == 3
        })
        .await;
    assert!(records.iter().any(|record| {
        record["event"]["data"]["content"][0]["text"]
            .as_str()
            .is_some_and(|text| text.contains(&format!("image/png (75 bytes, {id})")))
    }));
    assert_eq!(
        server.log.attachment_ids().unwrap(),
        vec![id.parse().unwrap()],
        "one image, stored once"
    );
}

#[tokio::test]
async fn every_bad_image_is_refused_and_nothing_is_stored_or_recorded() {
    let server = Server::start().await;
    let (root, child) = settled(&server, "eyes").await;
    let (blind_root, blind) = settled(&server, "blind").await;
    let other_root = server.open_root().await;
    server
        .runtime
        .set_attachment_limits(AttachmentLimits {
            per_image: 100,
            per_request: 160,
        })
        .unwrap();
    let head = server.head();
    use base64::Engine as _;
    let encode = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let big = encode(&[&png()[..], &[0u8; 30][..]].concat());
    let unknown = AttachmentId::of(b"never stored").to_string();
    let cases = [
        (
            "declared jpeg, bytes png",
            image_prompt(&child, &root, "a", vec![image("image/jpeg", PNG_BASE64)]),
            "image/png",
        ),
        (
            "not an image",
            image_prompt(
                &child,
                &root,
                "b",
                vec![image("image/png", &encode(b"%PDF-1.7"))],
            ),
            "not a PNG",
        ),
        (
            "bad base64",
            image_prompt(&child, &root, "c", vec![image("image/png", "%%%")]),
            "not base64",
        ),
        (
            "over the image cap",
            image_prompt(&child, &root, "d", vec![image("image/png", &big)]),
            "over the 100 byte cap",
        ),
        (
            "over the request cap",
            image_prompt(
                &child,
                &root,
                "e",
                vec![
                    image("image/png", PNG_BASE64),
                    image("image/png", PNG_BASE64),
                    image("image/png", PNG_BASE64),
                ],
            ),
            "160 byte cap of one request",
        ),
        (
            "unknown attachment",
            image_prompt(
                &child,
                &root,
                "f",
                vec![json!({"type": "image", "mimeType": "image/png", "attachment": unknown})],
            ),
            "is stored",
        ),
        (
            "text-only route",
            image_prompt(
                &blind,
                &blind_root,
                "g",
                vec![image("image/png", PNG_BASE64)],
            ),
            "does not accept image input",
        ),
    ];
    for (name, body, expected) in cases {
        let (status, refused) = server.post("/v1/prompt", &body).await;
        assert_eq!(
            (status, refused["code"].as_str().unwrap()),
            (422, "subagent/attachment-invalid"),
            "{name}: {refused}"
        );
        let message = refused["message"].as_str().unwrap();
        assert!(message.contains(expected), "{name}: {message}");
    }
    // A good image behind a refusal for another reason: nothing stored.
    let (status, refused) = server
        .post(
            "/v1/prompt",
            &image_prompt(
                &child,
                &other_root,
                "h",
                vec![image("image/png", PNG_BASE64)],
            ),
        )
        .await;
    assert_eq!(
        (status, refused["code"].as_str().unwrap()),
        (403, "subagent/unauthorized")
    );
    assert_eq!(server.head(), head, "no refusal appends");
    assert_eq!(
        server.log.attachment_ids().unwrap(),
        Vec::new(),
        "no refusal stores"
    );
    // The text-only child still takes text.
    let (status, receipt) = server
        .post(
            "/v1/prompt",
            &prompt(&blind, &blind_root, "t", "words only"),
        )
        .await;
    assert_eq!(status, 200, "{receipt}");
}

#[tokio::test]
async fn attachment_reads_refuse_bad_ids_unknown_ids_and_missing_tokens() {
    let server = Server::start().await;
    let (status, body) = server.get("/v1/attachments/sha256:beef").await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (400, "gateway/bad-request")
    );
    let unknown = AttachmentId::of(b"nothing").to_string();
    let (status, body) = server.get(&format!("/v1/attachments/{unknown}")).await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (404, "gateway/not-found")
    );
    let anonymous = server
        .client
        .get(format!("{}/v1/attachments/{unknown}", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
}

#[tokio::test]
async fn a_prompt_has_its_own_body_cap_above_the_general_one() {
    let limits = Limits {
        body_bytes: 1_024,
        prompt_body_bytes: 4_096,
        ..Limits::default()
    };
    let server = Server::with(limits, CapacityLimits::default()).await;
    let (root, child) = settled(&server, "eyes").await;
    let head = server.head();
    // Over the general cap, under the prompt's: accepted.
    let body = prompt(&child, &root, "fits", &"x".repeat(2_000));
    let (status, receipt) = server.post("/v1/prompt", &body).await;
    assert_eq!(status, 200, "{receipt}");
    assert!(server.head() > head);
    // Over the prompt's cap: refused before the runtime.
    let head = server.head();
    let body = prompt(&child, &root, "too-big", &"x".repeat(5_000));
    let (status, refused) = server.post("/v1/prompt", &body).await;
    assert_eq!(
        (status, refused["code"].as_str().unwrap()),
        (413, "gateway/payload-too-large")
    );
    // Other routes keep the general cap.
    let (status, refused) = server
        .post("/v1/roots", &json!({"label": "y".repeat(2_000)}))
        .await;
    assert_eq!(
        (status, refused["code"].as_str().unwrap()),
        (413, "gateway/payload-too-large")
    );
    assert_eq!(server.head(), head);
}
