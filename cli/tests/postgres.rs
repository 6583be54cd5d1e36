//! The command line on a PostgreSQL log, against a real server this test
//! starts itself (`subagent_pg::testing::TestServer`): the demo delegates
//! into it, its closing hints run as printed with the URL, every inspection
//! command reads it, and `export`/`import` round-trip byte-identically
//! between RocksDB and PostgreSQL both ways, attachments included. Two
//! `serve` hosts on one PostgreSQL log list each other's trees, refuse to
//! take each other's, and one takes the other's over after it is killed.

mod common;

use std::path::Path;

use common::serve::readiness;
use common::{subagents, text};
use subagent_pg::testing::{unique_schema, TestServer};
use subagent_projections::testing;

fn url(server: &TestServer, schema: &str) -> String {
    format!(
        "postgres://postgres@127.0.0.1:{}/postgres?schema={schema}",
        server.port()
    )
}

/// An export of an admissible history whose last record is a prompt to a
/// child carrying an image, by attachment id: the attachment's own line
/// comes just before it.
fn export_with_an_attachment() -> String {
    use base64::Engine as _;
    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n sniffed as one";
    let (records, id) = testing::history_with_image(PNG);
    let mut text = String::new();
    for (index, record) in records.iter().enumerate() {
        if index + 1 == records.len() {
            let bytes = base64::engine::general_purpose::STANDARD.encode(PNG);
            text.push_str(&serde_json::json!({"attachment": id, "bytes": bytes}).to_string());
            text.push('\n');
        }
        text.push_str(&serde_json::to_string(record).unwrap());
        text.push('\n');
    }
    text
}

fn ok(args: &[&str]) -> String {
    let output = subagents(args);
    let (out, err) = text(&output);
    assert!(output.status.success(), "subagents {args:?} failed: {err}");
    out
}

fn export_to(log: &str, file: &Path) -> Vec<u8> {
    ok(&["export", log, "--out", file.to_str().unwrap()]);
    std::fs::read(file).unwrap()
}

#[test]
fn the_demo_delegates_into_postgres_and_every_command_reads_it() {
    let server = TestServer::shared().expect("a PostgreSQL server");
    let log = url(server, &unique_schema("cli_demo"));
    let dir = tempfile::tempdir().unwrap();
    let demo = ok(&[
        "demo",
        "--data",
        dir.path().to_str().unwrap(),
        "--store",
        &log,
    ]);
    assert!(demo.contains("research    completed"), "{demo}");
    assert!(
        !dir.path().join("CURRENT").exists(),
        "nothing went to the --data directory"
    );

    for hint in common::run_closing_hints(&demo) {
        assert!(hint.contains("postgres://"), "{hint}");
    }
    assert!(ok(&["verify", &log]).contains("OK"));
    let tree = ok(&["tree", &log]);
    assert!(
        tree.contains("└── digger  [continuable · spawn · inactive · aborted]"),
        "{tree}"
    );
    // Every other reading command on the same URL.
    let root = common::root_of(&demo);
    let children: serde_json::Value =
        serde_json::from_str(&ok(&["children", &log, &root, "--json"])).unwrap();
    let labels: Vec<&str> = children
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|child| child["label"].as_str())
        .collect();
    assert_eq!(labels, ["research", "review", "shout", "digger"]);
    let records = ok(&["log", &log, "--json"]);
    let head = records.lines().count();
    assert!(head > 20, "{records}");
    assert!(
        records.lines().all(|line| line.starts_with('{')),
        "{records}"
    );
    let state: serde_json::Value = serde_json::from_str(&ok(&["replay", &log, "--json"])).unwrap();
    assert_eq!(state["roots"].as_array().map(Vec::len), Some(1));
    let diff = ok(&["diff", &log, "--from", "1", "--json"]);
    assert!(diff.contains("research"), "{diff}");
    // Read at a position: the root's first child is listed from its
    // catalog entry on, not before.
    let first_child = records
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .find(|record| record["event"]["type"] == "ChildCataloged")
        .expect("a child was cataloged")["position"]
        .as_u64()
        .unwrap();
    for (at, listed) in [(first_child - 1, 0), (first_child, 1)] {
        let at = at.to_string();
        let children: serde_json::Value =
            serde_json::from_str(&ok(&["children", &log, &root, "--at", &at, "--json"])).unwrap();
        assert_eq!(children.as_array().map(Vec::len), Some(listed), "at {at}");
    }
}

/// The staging schemas of imports (`import_<pid>_…`) on the server.
fn import_schemas(server: &TestServer) -> Vec<String> {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let (client, connection) = server
            .config()
            .connect(subagent_pg::tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        client
            .query(
                "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'import\\_%' ORDER BY 1",
                &[],
            )
            .await
            .expect("list schemas")
            .iter()
            .map(|row| row.get(0))
            .collect()
    })
}

#[test]
fn export_and_import_round_trip_between_rocksdb_and_postgres_byte_identically() {
    let server = TestServer::shared().expect("a PostgreSQL server");
    let dir = tempfile::tempdir().unwrap();
    // A RocksDB log holding an attachment a record names.
    let source = dir.path().join("source");
    let written = dir.path().join("written.jsonl");
    std::fs::write(&written, export_with_an_attachment()).unwrap();
    ok(&[
        "import",
        source.to_str().unwrap(),
        written.to_str().unwrap(),
    ]);
    let source = source.to_str().unwrap().to_owned();
    let original = export_to(&source, &dir.path().join("original.jsonl"));
    assert!(
        String::from_utf8_lossy(&original).contains("attachment"),
        "the export carries the blob"
    );

    let pg = url(server, &unique_schema("cli_import"));
    let imported = ok(&[
        "import",
        &pg,
        dir.path().join("original.jsonl").to_str().unwrap(),
    ]);
    assert!(imported.contains("imported "), "{imported}");
    assert_eq!(
        export_to(&pg, &dir.path().join("from_pg.jsonl")),
        original,
        "RocksDB → PostgreSQL"
    );
    assert!(ok(&["verify", &pg]).contains("OK"));

    let back = dir.path().join("back");
    ok(&[
        "import",
        back.to_str().unwrap(),
        dir.path().join("from_pg.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(
        export_to(back.to_str().unwrap(), &dir.path().join("back.jsonl")),
        original,
        "PostgreSQL → RocksDB"
    );

    // An import into a schema that exists is refused, and the schema is untouched.
    let again = subagents(&[
        "import",
        &pg,
        dir.path().join("original.jsonl").to_str().unwrap(),
    ]);
    let (_, err) = text(&again);
    assert_eq!(again.status.code(), Some(1), "{err}");
    assert!(
        err.contains("already exists") && err.contains("is untouched"),
        "{err}"
    );
    assert_eq!(export_to(&pg, &dir.path().join("after.jsonl")), original);

    // A bad line leaves no schema behind: the target still does not exist.
    let broken = dir.path().join("broken.jsonl");
    std::fs::write(&broken, "{not json\n").unwrap();
    let fresh = url(server, &unique_schema("cli_broken"));
    let before = import_schemas(server);
    let refused = subagents(&["import", &fresh, broken.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(1));
    let after = import_schemas(server);
    assert_eq!(before, after, "the failed import left a staging schema");
    let missing = subagents(&["verify", &fresh]);
    let (_, err) = text(&missing);
    assert!(err.contains("holds no subagents log"), "{err}");
}

#[test]
fn a_bad_url_is_a_usage_error_and_an_unreachable_server_a_clear_failure() {
    for bad in [
        "postgres://u:hunter2@h/db?schema=Bad-Name",
        "postgres://u@h/db?bogus=1&password=hunter2",
    ] {
        let output = subagents(&["verify", bad]);
        let (_, err) = text(&output);
        assert_eq!(output.status.code(), Some(2), "{bad}: {err}");
        assert!(
            !err.contains("hunter2"),
            "a refused URL is shown without its password: {err}"
        );
    }
    let output = subagents(&["demo", "--store", "./not-a-url"]);
    assert_eq!(output.status.code(), Some(2));
    // Nothing listens on port 1 of loopback.
    let output = subagents(&[
        "verify",
        "postgres://postgres:secret@127.0.0.1:1/postgres?connect_timeout=2",
    ]);
    let (_, err) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        !err.contains("secret"),
        "the password is never printed: {err}"
    );
}

/// `serve --store URL`: the gateway on a PostgreSQL log (the token stays in
/// `--data`). A root opened over HTTP is in the log, and a second `serve`
/// on the same URL after a restart lists it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_the_gateway_on_a_postgres_log() {
    let server = TestServer::shared().expect("a PostgreSQL server");
    // Trust authentication ignores the password; it must never be printed.
    let log = url(server, &unique_schema("cli_serve"))
        .replace("postgres://postgres@", "postgres://postgres:secret@");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = common::serve::Serve::start_with(&data, &["--store", &log]);
    assert!(first.printed.iter().all(|line| !line.contains("secret")));
    let token = std::fs::read_to_string(data.join("gateway.token")).unwrap();
    let http = reqwest::Client::new();
    let created: serde_json::Value = http
        .post(format!("{}/v1/roots", first.base))
        .bearer_auth(token.trim())
        .json(&serde_json::json!({"label": "over-http"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let root = created["sessionId"].as_str().expect("a root id").to_owned();
    let (status, rest) = first.terminate();
    assert!(status.success());
    let log_line = rest
        .iter()
        .find(|line| line.starts_with("log: "))
        .unwrap_or_else(|| panic!("serve names its log: {rest:?}"));
    assert!(log_line.contains("postgres://postgres:***@"), "{log_line}");
    assert!(rest.iter().all(|line| !line.contains("secret")), "{rest:?}");
    assert!(
        ok(&["tree", &log]).contains("over-http"),
        "the root is in the PostgreSQL log"
    );
    assert!(!data.join("CURRENT").exists(), "no RocksDB log in --data");

    let second = common::serve::Serve::start_with(&data, &["--store", &log]);
    let roots: serde_json::Value = http
        .get(format!("{}/v1/roots", second.base))
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(roots.to_string().contains(&root), "{roots}");
    let (status, _) = second.terminate();
    assert!(status.success());
}

/// Polls `check` every 50 ms until it holds, for at most `seconds`.
async fn eventually<F, Fut>(seconds: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_serve_hosts_share_one_postgres_log_and_one_takes_over_the_others_trees() {
    let server = TestServer::shared().expect("a PostgreSQL server");
    let log = url(server, &unique_schema("cli_hosts"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let host = |name: &'static str| {
        common::serve::Serve::start_with(
            &data,
            &[
                "--store",
                &log,
                "--host-name",
                name,
                "--lease-term-ms",
                // Long enough that a loaded machine's stall (a renewal
                // every third of a term) never lets host-a's lease lapse
                // while host-b is checked against it.
                "5000",
            ],
        )
    };
    let a = host("host-a");
    let b = host("host-b");
    let token = std::fs::read_to_string(data.join("gateway.token")).unwrap();
    let token = token.trim();
    let http = reqwest::Client::new();
    let created: serde_json::Value = http
        .post(format!("{}/v1/roots", a.base))
        .bearer_auth(token)
        .json(&serde_json::json!({"label": "on-a"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let root = created["sessionId"].as_str().expect("a root id").to_owned();
    eventually(10, "host-b lists host-a's root", || async {
        let roots = http
            .get(format!("{}/v1/roots", b.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        roots.contains(&root)
    })
    .await;
    let reopen = || {
        http.post(format!("{}/v1/roots/{root}/reopen", b.base))
            .bearer_auth(token)
            .send()
    };
    // Taking host-a's root, starting a child in its tree or closing it,
    // on host-b, is refused naming the holder (not "unauthorized").
    let start = serde_json::json!({
        "provider": "spawn",
        "label": "stray",
        "request": {"prompt": [{"type": "text", "text": "hi"}]},
        "delivery": "parent"
    });
    for refused in [
        reopen().await.unwrap(),
        http.post(format!("{}/v1/roots/{root}/children", b.base))
            .bearer_auth(token)
            .json(&start)
            .send()
            .await
            .unwrap(),
        http.delete(format!("{}/v1/roots/{root}", b.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap(),
    ] {
        assert_eq!(refused.status(), 409);
        let body: serde_json::Value = refused.json().await.unwrap();
        assert_eq!(body["code"], "subagent/tree-elsewhere", "{body}");
        assert!(
            body["message"].as_str().unwrap().contains("host-a"),
            "{body}"
        );
    }

    assert!(!a.kill().success());
    eventually(30, "host-b takes the root over", || async {
        reopen().await.unwrap().status() == 200
    })
    .await;
    let (status, rest) = b.terminate();
    assert!(status.success());
    assert!(
        rest.iter()
            .any(|line| line == "host: host-b (one of several on this log; leases of 5000 ms)"),
        "{rest:?}"
    );
    let tree = ok(&["log", &log]);
    assert_eq!(tree.matches("TreeAcquired").count(), 2, "{tree}");
    assert!(ok(&["verify", &log]).contains("OK"));
}

#[test]
fn host_flags_need_a_postgres_store_and_a_term_in_range() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    for args in [
        vec!["demo", "--data", data, "--host-name", "a"],
        vec!["serve", "--data", data, "--lease-term-ms", "5000"],
        vec![
            "serve",
            "--store",
            "postgres://postgres@127.0.0.1:1/postgres",
            "--lease-term-ms",
            "0",
        ],
    ] {
        let output = subagents(&args);
        let (_, err) = text(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("--host-name") || err.contains("--lease-term-ms"),
            "{err}"
        );
    }
    assert!(!Path::new(data).exists(), "a usage error creates nothing");
}

/// A PostgreSQL crash under load: while the server is down every request is
/// refused 503 `store/unavailable` with a `Retry-After` (never 500) and the
/// readiness check says so; once it is back, `serve` reopens its runtime by
/// itself and every root it acknowledged, before or after, is in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_503_while_postgres_is_down_and_comes_back_with_nothing_lost() {
    let mut server = TestServer::start().expect("a PostgreSQL server of its own");
    let log = url(&server, &unique_schema("cli_outage"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let serve = common::serve::Serve::start_with(&data, &["--store", &log]);
    let token = std::fs::read_to_string(data.join("gateway.token")).unwrap();
    let token = token.trim().to_owned();
    let http = reqwest::Client::new();
    assert_eq!(readiness(&http, &serve.base).await, 200);
    let done = tokio_util::sync::CancellationToken::new();
    let load = tokio::spawn(common::serve::open_roots_until(
        serve.base.clone(),
        token.clone(),
        done.clone(),
    ));
    // `make soak` crashes the server ten times.
    let rounds: usize = std::env::var("SUBAGENTS_OUTAGE_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(1);
    for _ in 0..rounds {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        server.kill();
        eventually(30, "readiness to report the outage", || async {
            readiness(&http, &serve.base).await == 503
        })
        .await;
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        server = tokio::task::spawn_blocking(move || {
            server.restart().expect("the server starts again");
            server
        })
        .await
        .unwrap();
        eventually(60, "serve to reopen its runtime", || async {
            readiness(&http, &serve.base).await == 200
        })
        .await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    done.cancel();
    let answers = load.await.unwrap();
    let acknowledged = common::serve::acknowledged_across_an_outage(&answers);
    common::serve::assert_all_listed(&serve.base, &token, &acknowledged).await;
    let (status, _) = serve.terminate();
    assert!(status.success());
    let verified = subagents(&["verify", &log]);
    assert!(verified.status.success(), "{:?}", text(&verified));
    drop(server);
}
