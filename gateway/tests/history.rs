//! The console's reads over real HTTP on 127.0.0.1: the roots, a root's
//! tree with each session's state (live, and at a past position from
//! replay), the changes between two positions, the log's verification; and
//! the console's page and assets, the only answers without the token; a
//! transcript read a page at a time.

mod common;

use common::{has, Server, ALLOWED_ORIGIN};
use serde_json::Value;

/// The labels and states of a tree answer's nodes.
fn states(tree: &Value) -> Vec<(String, String)> {
    tree["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| {
            (
                node["label"].as_str().unwrap().to_owned(),
                node["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn roots_are_listed_with_whether_this_server_holds_them() {
    let server = Server::start().await;
    let held = server.open_root().await;
    let (status, closed) = server
        .post("/v1/roots", &serde_json::json!({"label": "other"}))
        .await;
    assert_eq!(status, 201);
    let closed = closed["sessionId"].as_str().unwrap().to_owned();
    server.delete(&format!("/v1/roots/{closed}")).await;
    let (status, roots) = server.get("/v1/roots").await;
    assert_eq!(status, 200, "{roots}");
    let roots = roots.as_array().unwrap();
    assert_eq!(roots.len(), 2);
    assert_eq!(roots[0]["sessionId"], held.as_str());
    assert_eq!(roots[0]["held"], true);
    assert_eq!(roots[1]["sessionId"], closed.as_str());
    assert_eq!(roots[1]["held"], false);
    assert_eq!(roots[1]["label"], "other");
    assert!(roots[0]["createdAt"].as_u64().unwrap() < roots[1]["createdAt"].as_u64().unwrap());
}

#[tokio::test]
async fn a_tree_is_live_or_as_it_stood_at_a_past_position() {
    let server = Server::start().await;
    let root = server.open_root().await;
    let before_children = server.head();
    let child = server.start_child(&root, "helper").await;
    server
        .until_transcript(&child, "the first turn", |records| {
            has(records, "TurnEnded")
        })
        .await;
    let (status, live) = server.get(&format!("/v1/sessions/{root}/tree")).await;
    assert_eq!(status, 200, "{live}");
    assert_eq!(live["head"], server.head());
    let nodes = live["nodes"].as_array().unwrap();
    assert_eq!(nodes[0]["id"], root.as_str());
    assert_eq!(nodes[0]["parentId"], Value::Null);
    assert_eq!(nodes[1]["id"], child.as_str());
    assert_eq!(nodes[1]["parentId"], root.as_str());
    assert_eq!(nodes[1]["depth"], 1);
    assert_eq!(nodes[1]["mode"], "continuable");
    assert_eq!(nodes[1]["stopReason"], "completed");

    // Before the child existed: the root alone, at that position.
    let (status, past) = server
        .get(&format!("/v1/sessions/{root}/tree?at={before_children}"))
        .await;
    assert_eq!(status, 200, "{past}");
    assert_eq!(past["position"], before_children);
    assert_eq!(
        states(&past),
        vec![("host".to_owned(), "inactive".to_owned())]
    );

    // Bad input: an unknown session, a position past the head, not a number.
    let unknown = "0190a8f0-0000-7000-8000-000000000009";
    let head = server.head();
    for (path, status, code) in [
        (
            format!("/v1/sessions/{unknown}/tree"),
            404,
            "replay/unknown-session",
        ),
        (
            format!("/v1/sessions/{root}/tree?at={}", head + 100),
            400,
            "replay/position-past-head",
        ),
        (
            format!("/v1/sessions/{root}/tree?at=soon"),
            400,
            "gateway/bad-request",
        ),
        (
            format!("/v1/sessions/{root}/tree?when=1"),
            400,
            "gateway/bad-request",
        ),
    ] {
        let (got, body) = server.get(&path).await;
        assert_eq!(
            (got, body["code"].as_str().unwrap()),
            (status, code),
            "{path}"
        );
    }
}

#[tokio::test]
async fn a_diff_names_what_changed_between_two_positions() {
    let server = Server::start().await;
    let root = server.open_root().await;
    let from = server.head();
    let child = server.start_child(&root, "helper").await;
    server
        .until_transcript(&child, "the first turn", |records| {
            has(records, "TurnEnded")
        })
        .await;
    let (status, diff) = server.get(&format!("/v1/diff?from={from}")).await;
    assert_eq!(status, 200, "{diff}");
    assert_eq!(diff["from"], from);
    assert_eq!(diff["to"], server.head());
    let kinds: Vec<&str> = diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|change| change["change"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"session-added"), "{diff}");
    assert!(kinds.contains(&"activation-started"), "{diff}");
    assert!(kinds.contains(&"activation-settled"), "{diff}");
    assert!(diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|change| !change["text"].as_str().unwrap().is_empty()));
    for (path, code) in [
        (
            format!("/v1/diff?from={}&to={from}", from + 1),
            "gateway/bad-request",
        ),
        ("/v1/diff".to_owned(), "gateway/bad-request"),
        (
            format!("/v1/diff?from=1&to={}", server.head() + 5),
            "replay/position-past-head",
        ),
    ] {
        let (status, body) = server.get(&path).await;
        assert_eq!(
            (status, body["code"].as_str().unwrap()),
            (400, code),
            "{path}"
        );
    }
}

#[tokio::test]
async fn verify_reports_the_live_log() {
    let server = Server::start().await;
    let root = server.open_root().await;
    server.start_child(&root, "helper").await;
    let (status, report) = server.get("/v1/verify").await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["ok"], true, "{report}");
    assert!(report["events"].as_u64().unwrap() >= 1);
    assert_eq!(report["problems"], serde_json::json!([]));
    assert_eq!(report["notes"], serde_json::json!([]));

    // A checkpoint of format 2, as the builds before format 3 wrote it, is
    // no problem, and is said.
    server
        .log
        .write_checkpoint(
            subagent_projections::checkpoint::CHECKPOINT_NAME,
            br#"{"checkpointVersion":2,"position":1,"state":{}}"#,
        )
        .unwrap();
    let (status, report) = server.get("/v1/verify").await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["problems"], serde_json::json!([]));
    let notes = report["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{report}");
    assert!(
        notes[0]
            .as_str()
            .unwrap()
            .starts_with("the checkpoint is of format 2"),
        "{report}"
    );

    // A damaged one is a problem.
    server
        .log
        .write_checkpoint(
            subagent_projections::checkpoint::CHECKPOINT_NAME,
            b"SAGCKPT\0 not a frame",
        )
        .unwrap();
    let (_, report) = server.get("/v1/verify").await;
    assert_eq!(report["ok"], false, "{report}");
    assert_eq!(report["notes"], serde_json::json!([]));
    assert_eq!(report["problems"].as_array().unwrap().len(), 1, "{report}");
}

#[tokio::test]
async fn the_console_is_served_without_the_token_under_a_strict_policy_and_nothing_else_is() {
    let server = Server::start().await;
    for (path, kind) in [
        ("/", "text/html"),
        ("/console/app.js", "text/javascript"),
        ("/console/style.css", "text/css"),
    ] {
        let response = server
            .client
            .get(format!("{}{path}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let header = |name: &str| response.headers()[name].to_str().unwrap().to_owned();
        assert!(header("content-type").starts_with(kind), "{path}");
        let policy = header("content-security-policy");
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(policy.contains(directive), "{path}: {policy}");
        }
        assert_eq!(header("x-content-type-options"), "nosniff");
        // A foreign origin is refused even for the page.
        let foreign = server
            .client
            .get(format!("{}{path}", server.base))
            .header("origin", "http://evil.test")
            .send()
            .await
            .unwrap();
        assert_eq!(foreign.status(), 403, "{path}");
    }
    let page = server
        .client
        .get(format!("{}/", server.base))
        .header("origin", ALLOWED_ORIGIN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("/console/app.js"));
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "nothing from elsewhere"
    );
    // Everything else still needs the token, near misses included.
    for path in [
        "/v1/roots",
        "/console/",
        "/console/app.js.map",
        "/index.html",
        "/console/../v1/roots",
    ] {
        let response = server
            .client
            .get(format!("{}{path}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{path}");
    }
    // POST to the page is not a public read.
    let response = server
        .client
        .post(format!("{}/", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
}

#[tokio::test]
async fn a_transcript_is_read_a_page_at_a_time_and_a_page_of_none_is_refused() {
    let server = Server::start().await;
    let root = server.open_root().await;
    let child = server.start_child(&root, "worker").await;
    let whole = server
        .until_transcript(&child, "its first turn", |records| {
            has(records, "TurnEnded")
        })
        .await;
    assert!(whole.len() > 2, "{whole:?}");

    // Pages of two, each `next` the `after` of the one that follows.
    let (mut after, mut paged) = (0, Vec::new());
    loop {
        let (status, page) = server
            .get(&format!(
                "/v1/sessions/{child}/transcript?after={after}&limit=2"
            ))
            .await;
        assert_eq!(status, 200, "{page}");
        let records = page["records"].as_array().unwrap().clone();
        assert!(records.len() <= 2, "{page}");
        paged.extend(records);
        match page["next"].as_u64() {
            Some(next) => after = next,
            None => break,
        }
    }
    assert_eq!(
        paged[..whole.len()],
        whole[..],
        "the pages are the transcript, in order"
    );

    let (status, body) = server
        .get(&format!("/v1/sessions/{child}/transcript?limit=0"))
        .await;
    assert_eq!(
        (status, body["code"].as_str().unwrap()),
        (400, "gateway/bad-request"),
        "{body}"
    );
}
