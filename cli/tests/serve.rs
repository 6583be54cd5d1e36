//! `subagents serve` as a user runs it: loopback by default (refusing a
//! public address without `--allow-remote`), a 0600 token file that is
//! never printed, a clean close on SIGTERM, and, across a restart on the
//! same data, an event stream that resumes from `Last-Event-ID` with no gap
//! and no duplicate, a root taken back, and a released child prompted
//! awake.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

mod common;

use common::serve::Serve;

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let bytes = response.bytes().await.unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// The ids of the event stream from `after` up to its caught-up marker.
    async fn event_ids(&self, after: Option<u64>) -> (Vec<u64>, u64) {
        let mut request = self
            .http
            .get(format!("{}/v1/events", self.base))
            .bearer_auth(&self.token);
        if let Some(after) = after {
            request = request.header("last-event-id", after.to_string());
        }
        let mut response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        let (mut ids, mut text) = (Vec::new(), String::new());
        loop {
            let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk())
                .await
                .expect("the stream answers")
                .unwrap()
                .expect("the stream stays open");
            text.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = text.find("\n\n") {
                let frame: String = text.drain(..end + 2).collect();
                if let Some(id) = frame.lines().find_map(|line| line.strip_prefix("id:")) {
                    ids.push(id.trim().parse().unwrap());
                }
                if frame.contains("event: caught-up") || frame.contains("event:caught-up") {
                    let data = frame.lines().find_map(|l| l.strip_prefix("data:")).unwrap();
                    let head: Value = serde_json::from_str(data.trim()).unwrap();
                    return (ids, head["head"].as_u64().unwrap());
                }
            }
        }
    }

    async fn until_turns(&self, child: &str, turns: usize) {
        for _ in 0..1_000 {
            let (_, page) = self
                .call(
                    reqwest::Method::GET,
                    &format!("/v1/sessions/{child}/transcript"),
                    None,
                )
                .await;
            let ended = page["records"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|record| record["event"]["type"] == "TurnEnded")
                .count();
            if ended >= turns {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{child} did not end {turns} turns");
    }
}

#[tokio::test]
async fn serve_survives_a_restart_and_its_event_stream_resumes_without_gap_or_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = Serve::start(&data);
    let token_file = data.join("gateway.token");
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_owned();
    assert!(
        first.printed.iter().all(|line| !line.contains(&token)),
        "{:?}",
        first.printed
    );
    assert!(
        first.printed[1].contains("gateway.token (created)"),
        "{:?}",
        first.printed
    );
    let client = Client {
        http: reqwest::Client::new(),
        base: first.base.clone(),
        token: token.clone(),
    };

    let (status, root) = client
        .call(
            reqwest::Method::POST,
            "/v1/roots",
            Some(json!({"label": "host"})),
        )
        .await;
    assert_eq!(status, 201);
    let root = root["sessionId"].as_str().unwrap().to_owned();
    let start = json!({
        "provider": "spawn", "label": "helper", "delivery": "parent",
        "request": {"prompt": [{"type": "text", "text": "begin"}]},
    });
    let (status, child) = client
        .call(
            reqwest::Method::POST,
            &format!("/v1/roots/{root}/children"),
            Some(start),
        )
        .await;
    assert_eq!(status, 201, "{child}");
    let child = child["childId"].as_str().unwrap().to_owned();
    client.until_turns(&child, 1).await;
    let (ids, seen_head) = client.event_ids(None).await;
    assert_eq!(ids, (1..=seen_head).collect::<Vec<_>>());

    let (status, _) = client
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/roots/{root}/children/{child}"),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, rest) = first.terminate();
    assert!(status.success(), "{rest:?}");
    assert_eq!(rest.last().map(String::as_str), Some("closed cleanly"));

    let second = Serve::start(&data);
    assert!(
        !second.printed[1].contains("(created)"),
        "{:?}",
        second.printed
    );
    let client = Client {
        base: second.base.clone(),
        ..client
    };
    let (resumed, head) = client.event_ids(Some(seen_head)).await;
    assert!(head > seen_head, "the release and the close were recorded");
    assert_eq!(resumed, (seen_head + 1..=head).collect::<Vec<_>>());

    let (status, _) = client
        .call(
            reqwest::Method::POST,
            &format!("/v1/roots/{root}/reopen"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let prompt = json!({
        "address": {"childSessionId": child, "parentSessionId": root, "mode": "continuable"},
        "delivery": "queue", "requestId": "after-restart",
        "content": [{"type": "text", "text": "still there?"}],
    });
    let (status, receipt) = client
        .call(reqwest::Method::POST, "/v1/prompt", Some(prompt))
        .await;
    assert_eq!(status, 200, "{receipt}");
    client.until_turns(&child, 2).await;
}

/// `serve` on `dir/d` listening on `listen`, run to its end, which must be
/// a refusal (exit 1).
fn serve_refused(dir: &std::path::Path, listen: &str) -> std::process::Output {
    let output = Command::new(env!("CARGO_BIN_EXE_subagents"))
        .args([
            "serve",
            "--data",
            dir.join("d").to_str().unwrap(),
            "--listen",
            listen,
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    output
}

#[test]
fn serve_refuses_a_public_address_without_allow_remote() {
    let dir = tempfile::tempdir().unwrap();
    let output = serve_refused(dir.path(), "0.0.0.0:0");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("refusing to listen beyond loopback without --allow-remote"),
        "{stderr}"
    );
    assert!(!dir.path().join("d").exists(), "nothing was created");
}

#[test]
fn serve_on_an_address_in_use_names_it_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let output = serve_refused(dir.path(), &address);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("listening on {address}: ")) && stderr.contains("in use"),
        "{stderr}"
    );
    assert!(!dir.path().join("d").exists(), "nothing was created");
}

/// A real 2x2 RGB PNG (75 bytes), as base64.
const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEklEQVR4nGP4z8DAAMIM/4EAAB/uBfsL2WiLAAAAAElFTkSuQmCC";

impl Client {
    /// The bytes and type `GET /v1/attachments/{id}` answers.
    async fn attachment(&self, id: &str) -> (u16, String, Vec<u8>) {
        let response = self
            .http
            .get(format!("{}/v1/attachments/{id}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let kind = response
            .headers()
            .get("content-type")
            .map(|value| value.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (status, kind, response.bytes().await.unwrap().to_vec())
    }
}

fn token_of(data: &std::path::Path) -> String {
    std::fs::read_to_string(data.join("gateway.token"))
        .unwrap()
        .trim()
        .to_owned()
}

#[tokio::test]
async fn an_image_prompt_survives_a_restart_and_an_export_import_round_trip() {
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD
        .decode(PNG_BASE64)
        .unwrap();
    let id = subagent_core::AttachmentId::of(&png).to_string();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = Serve::start(&data);
    let client = Client {
        http: reqwest::Client::new(),
        base: first.base.clone(),
        token: token_of(&data),
    };
    let (_, root) = client
        .call(
            reqwest::Method::POST,
            "/v1/roots",
            Some(json!({"label": "host"})),
        )
        .await;
    let root = root["sessionId"].as_str().unwrap().to_owned();
    let start = json!({
        "provider": "spawn", "label": "eyes", "delivery": "parent",
        "request": {"prompt": [{"type": "text", "text": "begin"}]},
    });
    let (_, child) = client
        .call(
            reqwest::Method::POST,
            &format!("/v1/roots/{root}/children"),
            Some(start),
        )
        .await;
    let child = child["childId"].as_str().unwrap().to_owned();
    client.until_turns(&child, 1).await;
    let prompt = json!({
        "address": {"childSessionId": child, "parentSessionId": root, "mode": "continuable"},
        "delivery": "queue", "requestId": "picture",
        "content": [{"type": "text", "text": "look"}, {"type": "image", "mimeType": "image/png", "data": PNG_BASE64}],
    });
    let (status, receipt) = client
        .call(reqwest::Method::POST, "/v1/prompt", Some(prompt))
        .await;
    assert_eq!(status, 200, "{receipt}");
    client.until_turns(&child, 2).await;
    assert_eq!(
        client.attachment(&id).await,
        (200, "image/png".into(), png.clone())
    );
    let (status, rest) = first.terminate();
    assert!(status.success(), "{rest:?}");

    // After a restart the image is still served.
    let second = Serve::start(&data);
    let client = Client {
        base: second.base.clone(),
        ..client
    };
    assert_eq!(
        client.attachment(&id).await,
        (200, "image/png".into(), png.clone())
    );
    let (status, rest) = second.terminate();
    assert!(status.success(), "{rest:?}");

    // Export carries it, once, before the record that names it; import
    // stores it again; a second export is identical.
    let export = dir.path().join("export.jsonl");
    let output = common::subagents(&[
        "export",
        data.to_str().unwrap(),
        "--out",
        export.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{output:?}");
    let text = std::fs::read_to_string(&export).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let carried: Vec<usize> = (0..lines.len())
        .filter(|&index| lines[index].starts_with("{\"attachment\":"))
        .collect();
    assert_eq!(carried.len(), 1, "one attachment line");
    assert!(lines[carried[0]].contains(&id));
    assert!(
        lines[carried[0] + 1].contains(&format!("\"attachment\":\"{id}\"")),
        "the record that names it follows: {}",
        lines[carried[0] + 1]
    );
    let imported = dir.path().join("imported");
    let output = common::subagents(&[
        "import",
        imported.to_str().unwrap(),
        export.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{output:?}");
    let again = dir.path().join("again.jsonl");
    let output = common::subagents(&[
        "export",
        imported.to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(std::fs::read_to_string(&again).unwrap(), text);

    let third = Serve::start(&imported);
    let client = Client {
        http: reqwest::Client::new(),
        base: third.base.clone(),
        token: token_of(&imported),
    };
    assert_eq!(client.attachment(&id).await, (200, "image/png".into(), png));
}

/// A full disk under load (no file may grow past 256 KiB, so RocksDB's
/// write-ahead log fails with EFBIG): every request is refused 503
/// `store/unavailable` with a `Retry-After`, never 500; once the disk has
/// room again `serve` reopens its runtime by itself, and every root it
/// acknowledged is in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_503_on_a_full_disk_and_comes_back_once_it_has_room() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let serve = Serve::start_file_limited(&data, 256 * 1024);
    let token = token_of(&data);
    let http = reqwest::Client::new();
    // Two event streams: one read to its end, one never read. Neither may
    // keep the failed log's directory locked from the reopen.
    let events = || {
        http.get(format!("{}/v1/events", serve.base))
            .bearer_auth(&token)
            .send()
    };
    let stalled = events().await.unwrap();
    assert_eq!(stalled.status(), 200);
    let mut read = events().await.unwrap();
    let reader = tokio::spawn(async move {
        let mut bytes = 0;
        while let Ok(Some(chunk)) = read.chunk().await {
            bytes += chunk.len();
        }
        bytes
    });
    let done = tokio_util::sync::CancellationToken::new();
    let load = tokio::spawn(common::serve::open_roots_until(
        serve.base.clone(),
        token.clone(),
        done.clone(),
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while common::serve::readiness(&http, &serve.base).await != 503 {
        assert!(
            std::time::Instant::now() < deadline,
            "the disk never filled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Refused while full, with the cause named.
    tokio::time::sleep(Duration::from_secs(1)).await;
    serve.lift_file_limit();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while common::serve::readiness(&http, &serve.base).await != 200 {
        assert!(std::time::Instant::now() < deadline, "serve never reopened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    done.cancel();
    let answers = load.await.unwrap();
    let acknowledged = common::serve::acknowledged_across_an_outage(&answers);
    common::serve::assert_all_listed(&serve.base, &token, &acknowledged).await;
    // The stream being read ended with the failed runtime, having carried
    // its events; the client resumes with `Last-Event-ID`.
    let streamed = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("the stream ended with its runtime")
        .unwrap();
    assert!(streamed > 0);
    drop(stalled);
    let (status, _) = serve.terminate();
    assert!(status.success());
    let verified = Command::new(env!("CARGO_BIN_EXE_subagents"))
        .args(["verify", data.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
}
