//! The spec's two remote methods over real HTTP on 127.0.0.1: `prompt`
//! (delivery, idempotent retries, and each error code the spec lists) and
//! `interruptByParent` (a running target, no-ops, the wrong parent), a
//! storage failure answered as `gateway/internal`, and a client gone before
//! acceptance leaving nothing behind.

mod common;

use common::{count, has, prompt, Server};
use serde_json::json;
use subagent_runtime::CapacityLimits;

/// The stop reasons of the turns in `records`, in order.
fn stop_reasons(records: &[serde_json::Value]) -> Vec<String> {
    records
        .iter()
        .filter(|record| record["event"]["type"] == "TurnEnded")
        .map(|record| {
            record["event"]["data"]["stopReason"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// A child that completed its first turn, and its root.
async fn settled_child(server: &Server) -> (String, String) {
    let root = server.open_root().await;
    let child = server.start_child(&root, "helper").await;
    let records = server
        .until_transcript(&child, "the first turn", |records| {
            has(records, "TurnEnded")
        })
        .await;
    assert_eq!(stop_reasons(&records), vec!["completed"]);
    (root, child)
}

#[tokio::test]
async fn a_prompt_is_accepted_with_its_request_id_and_zone_and_runs_a_turn() {
    let server = Server::start().await;
    let (root, child) = settled_child(&server).await;
    let mut body = prompt(&child, &root, "req-1", "and now?");
    body["timeZone"] = "Europe/Paris".into();
    body["delivery"] = "steer".into();
    let (status, receipt) = server.post("/v1/prompt", &body).await;
    assert_eq!(status, 200, "{receipt}");
    let message_id = receipt["messageId"].as_str().unwrap().to_owned();
    let records = server
        .until_transcript(&child, "the second turn", |records| {
            count(records, "TurnEnded") == 2
        })
        .await;
    let accepted = records
        .iter()
        .find(|record| record["event"]["data"]["messageId"] == message_id.as_str())
        .expect("the message is in the child's stream");
    assert_eq!(
        accepted["event"]["data"]["source"],
        json!({"kind": "browser", "requestId": "req-1", "zone": "Europe/Paris"})
    );
    assert_eq!(accepted["event"]["data"]["delivery"], "steer");
    assert_eq!(stop_reasons(&records), vec!["completed", "completed"]);
    assert_eq!(count(&records, "AssistantMessage"), 2, "each turn replied");
}

#[tokio::test]
async fn a_retry_returns_the_first_receipt_and_another_body_under_the_same_id_is_refused() {
    let server = Server::start().await;
    let (root, child) = settled_child(&server).await;
    let body = prompt(&child, &root, "req-7", "once");
    let (_, first) = server.post("/v1/prompt", &body).await;
    server
        .until_transcript(&child, "the prompt's turn", |records| {
            count(records, "TurnEnded") == 2
        })
        .await;
    let head = server.head();
    let (status, again) = server.post("/v1/prompt", &body).await;
    assert_eq!((status, &again), (200, &first));
    assert_eq!(server.head(), head, "a retry appends nothing");
    // Even after the root closed: the receipt is durable.
    let (status, _) = server.delete(&format!("/v1/roots/{root}")).await;
    assert_eq!(status, 204);
    let head_after_close = server.head();
    let (status, late) = server.post("/v1/prompt", &body).await;
    assert_eq!((status, &late), (200, &first));
    assert_eq!(server.head(), head_after_close);

    let other = prompt(&child, &root, "req-7", "twice");
    let (status, refused) = server.post("/v1/prompt", &other).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["code"], "gateway/bad-request");
    assert!(refused["message"].as_str().unwrap().contains("req-7"));
    assert_eq!(server.head(), head_after_close, "a refusal appends nothing");
}

#[tokio::test]
async fn malformed_prompts_are_bad_requests_and_append_nothing() {
    let server = Server::start().await;
    let (root, child) = settled_child(&server).await;
    let head = server.head();
    let mut one_shot = prompt(&child, &root, "r", "x");
    one_shot["address"]["mode"] = "one-shot".into();
    let mut empty_id = prompt(&child, &root, "", "x");
    let mut empty_child = prompt("", &root, "r", "x");
    let mut no_content = prompt(&child, &root, "r", "x");
    no_content["content"] = json!([]);
    let mut unknown_field = prompt(&child, &root, "r", "x");
    unknown_field["extra"] = true.into();
    empty_id["delivery"] = "queue".into();
    empty_child["delivery"] = "queue".into();
    for body in [one_shot, empty_id, empty_child, no_content, unknown_field] {
        let (status, refused) = server.post("/v1/prompt", &body).await;
        assert_eq!(status, 400, "{body}: {refused}");
        assert_eq!(refused["code"], "gateway/bad-request", "{body}");
    }
    assert_eq!(server.head(), head);
}

#[tokio::test]
async fn every_refusal_the_spec_lists_for_prompt_is_reachable() {
    let server = Server::start().await;
    let (root, child) = settled_child(&server).await;
    let other_root = server.open_root().await;
    let external = server.start_with(&root, "process", "shout").await;
    // Let the external run settle and report, so the head stays put.
    server
        .until_transcript(&external, "the run to settle", |records| {
            has(records, "RunSettled")
        })
        .await;
    server
        .until_transcript(&root, "the run's report", |records| {
            records
                .iter()
                .any(|record| record["event"]["data"]["source"]["kind"] == "subagent-report")
        })
        .await;
    let head = server.head();

    let mut zone = prompt(&child, &root, "z", "x");
    zone["timeZone"] = "Mars/Olympus_Mons".into();
    let mut image = prompt(&child, &root, "i", "x");
    // PNG bytes declared as GIF (gateway/tests/attachments.rs has the rest).
    image["content"] = json!([{"type": "image", "mimeType": "image/gif", "data": "iVBORw0KGgo="}]);
    let cases = [
        (zone, 422, "subagent/invalid-time-zone"),
        (image, 422, "subagent/attachment-invalid"),
        (
            prompt(&child, &other_root, "u", "x"),
            403,
            "subagent/unauthorized",
        ),
        (
            prompt(&external, &root, "n", "x"),
            409,
            "subagent/not-resumable",
        ),
    ];
    for (body, status, code) in cases {
        let (got, refused) = server.post("/v1/prompt", &body).await;
        assert_eq!(
            (got, refused["code"].as_str().unwrap()),
            (status, code),
            "{refused}"
        );
    }
    assert_eq!(server.head(), head, "no refusal appends");

    // The parent is not live once its root closed.
    server.delete(&format!("/v1/roots/{root}")).await;
    let (status, refused) = server
        .post("/v1/prompt", &prompt(&child, &root, "p", "x"))
        .await;
    assert_eq!(
        (status, refused["code"].as_str().unwrap()),
        (409, "subagent/parent-unavailable")
    );
}

#[tokio::test]
async fn a_cold_resume_at_capacity_is_delivery_unavailable() {
    let limits = CapacityLimits {
        total: Some(1),
        per_parent: None,
    };
    let server = Server::with(subagent_gateway::Limits::default(), limits).await;
    let (root, child) = settled_child(&server).await;
    // Release the child, then take the only slot with a slow sibling.
    let (status, _) = server
        .delete(&format!("/v1/roots/{root}/children/{child}"))
        .await;
    assert_eq!(status, 204);
    server
        .until_transcript(&child, "the release", |records| {
            has(records, "ActivationReleased")
        })
        .await;
    let _slow = server.start_child(&root, "slow").await;
    let head = server.head();
    let (status, refused) = server
        .post("/v1/prompt", &prompt(&child, &root, "c", "wake"))
        .await;
    assert_eq!(status, 503, "{refused}");
    assert_eq!(refused["code"], "subagent/delivery-unavailable");
    assert_eq!(server.head(), head);
}

#[tokio::test]
async fn a_prompt_to_a_released_child_cold_resumes_it() {
    let server = Server::start().await;
    let (root, child) = settled_child(&server).await;
    server
        .delete(&format!("/v1/roots/{root}/children/{child}"))
        .await;
    server
        .until_transcript(&child, "the release", |records| {
            has(records, "ActivationReleased")
        })
        .await;
    let (status, receipt) = server
        .post("/v1/prompt", &prompt(&child, &root, "w", "again"))
        .await;
    assert_eq!(status, 200, "{receipt}");
    let records = server
        .until_transcript(&child, "the resumed turn", |records| {
            count(records, "TurnEnded") == 2
        })
        .await;
    assert_eq!(count(&records, "ActivationRequested"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_prompts_to_different_children_are_each_accepted_once() {
    let server = std::sync::Arc::new(Server::start().await);
    let root = server.open_root().await;
    let mut children = Vec::new();
    for index in 0..64 {
        children.push(server.start_child(&root, &format!("c{index}")).await);
    }
    for child in &children {
        server
            .until_transcript(child, "the first turn", |records| has(records, "TurnEnded"))
            .await;
    }
    let mut prompts = tokio::task::JoinSet::new();
    for (index, child) in children.iter().enumerate() {
        let body = prompt(child, &root, &format!("r{index}"), "concurrent");
        let server = std::sync::Arc::clone(&server);
        prompts.spawn(async move { server.post("/v1/prompt", &body).await });
    }
    let mut ids = std::collections::HashSet::new();
    while let Some(answer) = prompts.join_next().await {
        let (status, receipt) = answer.unwrap();
        assert_eq!(status, 200, "{receipt}");
        assert!(ids.insert(receipt["messageId"].as_str().unwrap().to_owned()));
    }
    assert_eq!(ids.len(), 64);
    for child in &children {
        let records = server
            .until_transcript(child, "the prompt's turn", |records| {
                count(records, "MessageAccepted") == 2 && count(records, "TurnEnded") == 2
            })
            .await;
        assert_eq!(stop_reasons(&records), vec!["completed", "completed"]);
    }
}

#[tokio::test]
async fn interrupt_by_parent_stops_a_running_turn_and_is_a_no_op_otherwise() {
    let server = Server::start().await;
    let root = server.open_root().await;
    let slow = server.start_child(&root, "slow").await;
    server
        .until_transcript(&slow, "the slow turn to start", |records| {
            has(records, "AssistantMessage")
        })
        .await;
    let address = json!({"childSessionId": slow, "parentSessionId": root, "mode": "continuable"});
    let (status, receipt) = server.post("/v1/interruptByParent", &address).await;
    assert_eq!((status, receipt), (200, json!({"interrupted": true})));
    let records = server
        .until_transcript(&slow, "the turn to end", |records| {
            has(records, "TurnEnded")
        })
        .await;
    let ended = records
        .iter()
        .find(|r| r["event"]["type"] == "TurnEnded")
        .unwrap();
    assert_eq!(ended["event"]["data"]["stopReason"], "aborted", "{ended}");
    assert!(has(&records, "InterruptRequested"));

    // Idle now, and an absent target: accepted no-ops that append nothing.
    let head = server.head();
    let (status, receipt) = server.post("/v1/interruptByParent", &address).await;
    assert_eq!((status, receipt), (200, json!({"interrupted": false})));
    let absent = json!({
        "childSessionId": "0190a8f0-0000-7000-8000-000000000001",
        "parentSessionId": root,
        "mode": "continuable",
    });
    let (status, receipt) = server.post("/v1/interruptByParent", &absent).await;
    assert_eq!((status, receipt), (200, json!({"interrupted": false})));
    assert_eq!(server.head(), head);
}

#[tokio::test]
async fn interrupt_by_the_wrong_parent_is_unauthorized_and_an_empty_id_is_a_bad_request() {
    let server = Server::start().await;
    let root = server.open_root().await;
    let other = server.open_root().await;
    let slow = server.start_child(&root, "slow").await;
    let head = server.head();
    let wrong = json!({"childSessionId": slow, "parentSessionId": other, "mode": "continuable"});
    let (status, refused) = server.post("/v1/interruptByParent", &wrong).await;
    assert_eq!(
        (status, refused["code"].as_str().unwrap()),
        (403, "subagent/unauthorized")
    );
    let empty = json!({"childSessionId": "", "parentSessionId": root, "mode": "continuable"});
    let (status, refused) = server.post("/v1/interruptByParent", &empty).await;
    assert_eq!(
        (status, refused["code"].as_str().unwrap()),
        (400, "gateway/bad-request")
    );
    assert_eq!(server.head(), head);
}

#[tokio::test]
async fn a_storage_failure_is_store_unavailable_naming_its_cause() {
    let disk = subagent_store::filling::FillingLog::new();
    let server = Server::over(
        std::sync::Arc::new(disk.clone()),
        subagent_gateway::Limits::default(),
        CapacityLimits::default(),
    )
    .await;
    let (root, child) = settled_child(&server).await;
    disk.set_full(true);
    let response = server
        .request(reqwest::Method::POST, "/v1/prompt")
        .json(&prompt(&child, &root, "full", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    let refused: serde_json::Value = response.json().await.unwrap();
    assert_eq!(refused["code"], "store/unavailable");
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains("No space left on device"), "{message}");
    // Unsupervised, the engine stays stopped: a later request names the
    // first failure.
    disk.set_full(false);
    let (status, later) = server.post("/v1/roots", &json!({"label": "again"})).await;
    assert_eq!(
        (status, later["code"].as_str().unwrap()),
        (503, "store/unavailable")
    );
    assert!(
        later["message"]
            .as_str()
            .unwrap()
            .contains("the log failed earlier"),
        "{later}"
    );
    assert_eq!(server.status_of("/readyz").await, 200, "nothing reopens it");
}

/// Supervised (as `serve` runs it): while the disk is full every route,
/// reads too, answers 503 `store/unavailable` with a `Retry-After`, and
/// `/readyz` says so (`/healthz` does not: the process answers); once the
/// disk has room the runtime is reopened, takes its roots back, and the
/// next requests succeed with what was acknowledged still there.
#[tokio::test]
async fn a_supervised_gateway_answers_503_until_the_disk_has_room_then_serves() {
    let disk = subagent_store::filling::FillingLog::new();
    let server = Server::supervised(std::sync::Arc::new(disk.clone())).await;
    let (root, child) = settled_child(&server).await;
    assert_eq!(server.status_of("/readyz").await, 200);
    disk.set_full(true);
    let (status, refused) = server
        .post("/v1/prompt", &prompt(&child, &root, "full", "x"))
        .await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (503, Some("store/unavailable"))
    );
    let mut waited = 0;
    while server.status_of("/readyz").await != 503 {
        waited += 1;
        assert!(waited < 500, "readiness never reported the outage");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(server.status_of("/healthz").await, 200);
    let response = server
        .request(
            reqwest::Method::GET,
            &format!("/v1/sessions/{root}/children"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503, "reads are refused too");
    let retry: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["code"], "store/unavailable");
    assert!(
        body["message"].as_str().unwrap().contains("being reopened"),
        "{body}"
    );

    disk.set_full(false);
    let mut waited = 0;
    while server.status_of("/readyz").await != 200 {
        waited += 1;
        assert!(waited < 1000, "the runtime was never reopened");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (status, children) = server.get(&format!("/v1/sessions/{root}/children")).await;
    assert_eq!(status, 200, "{children}");
    assert!(children.to_string().contains(&child), "{children}");
    // The root is held again: a start below it is taken.
    let after = server.start_child(&root, "after").await;
    assert!(!after.is_empty());
}

#[tokio::test]
async fn a_retry_from_another_address_gets_no_receipt() {
    let server = Server::start().await;
    let (root, child) = settled_child(&server).await;
    let other = server.open_root().await;
    let (status, _) = server
        .post("/v1/prompt", &prompt(&child, &root, "mine", "hello"))
        .await;
    assert_eq!(status, 200);
    let (status, refused) = server
        .post("/v1/prompt", &prompt(&child, &other, "mine", "hello"))
        .await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["code"], "subagent/unauthorized");
}

/// `gateway/cancelled` cannot reach a client that went away, so what is
/// tested is what it promises: a prompt whose client disconnects before
/// the message is accepted (here, halfway through its body) records
/// nothing, and the server goes on serving.
#[tokio::test]
async fn a_client_gone_before_acceptance_leaves_nothing_behind() {
    use tokio::io::AsyncWriteExt;
    let server = Server::start().await;
    let (root, child) = settled_child(&server).await;
    let head = server.head();
    let body = prompt(&child, &root, "gone", "never finished").to_string();
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request = format!(
        "POST /v1/prompt HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
        common::TOKEN,
        body.len(),
        &body[..body.len() / 2]
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.flush().await.unwrap();
    drop(stream);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(server.head(), head, "nothing was recorded");
    // The same request, whole, is accepted: the first left no receipt.
    let (status, receipt) = server
        .post("/v1/prompt", &serde_json::from_str(&body).unwrap())
        .await;
    assert_eq!(status, 200, "{receipt}");
    assert!(server.head() > head);
}
