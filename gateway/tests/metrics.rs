//! `GET /metrics` over real HTTP after a known workload: three `spawn`
//! children (two complete, one fails by script), a start refused before the
//! engine (an unknown provider) and one refused by its rules (a depth cap),
//! and one open event stream. The scrape's counters are exact, and so are
//! its gauges: three live continuable activations and no external one, the
//! log's head and the events since its stored checkpoint as read from the
//! log itself, one subscriber. The append latency is a Prometheus
//! histogram with the gateway's buckets, and without the token the scrape
//! is the gateway's usual 401.
//!
//! One test in its own binary: the recorder is process-global, so only this
//! workload is counted.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{answer, has, read_sse, Server, TOKEN};
use serde_json::{json, Value};
use subagent_core::telemetry::metric;
use subagent_core::RecordedEvent;
use subagent_projections::checkpoint;
use subagent_runtime::scripted::Step;
use subagent_runtime::{Script, ScriptedHost};
use subagent_store::EventLogExt;

/// One sample line of the text format: `name{key="value",...} value`.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// One scrape: its text, its samples, and its `# TYPE` and `# HELP` lines
/// by metric name.
struct Scrape {
    text: String,
    samples: Vec<Sample>,
    types: BTreeMap<String, String>,
    helps: BTreeMap<String, String>,
}

impl Scrape {
    fn parse(text: String) -> Scrape {
        let mut samples = Vec::new();
        let mut types = BTreeMap::new();
        let mut helps = BTreeMap::new();
        for line in text.lines().map(str::trim).filter(|line| !line.is_empty()) {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest
                    .split_once(' ')
                    .unwrap_or_else(|| panic!("bad TYPE line {line:?}"));
                types.insert(name.to_owned(), kind.to_owned());
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest
                    .split_once(' ')
                    .unwrap_or_else(|| panic!("bad HELP line {line:?}"));
                helps.insert(name.to_owned(), help.to_owned());
            } else if !line.starts_with('#') {
                samples.push(parse_sample(line));
            }
        }
        Scrape {
            text,
            samples,
            types,
            helps,
        }
    }

    /// The value of the sample `name` with exactly `labels`, if there is one.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect();
        let mut matching = self
            .samples
            .iter()
            .filter(|sample| sample.name == name && sample.labels == labels);
        let found = matching.next().map(|sample| sample.value);
        assert!(
            matching.next().is_none(),
            "{name} {labels:?} appears twice in\n{}",
            self.text
        );
        found
    }

    /// As [`Scrape::value`], which must be there.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels)
            .unwrap_or_else(|| panic!("no {name} {labels:?} in\n{}", self.text))
    }

    /// The sum of every sample of `name`, whatever its labels.
    fn total(&self, name: &str) -> f64 {
        self.samples
            .iter()
            .filter(|sample| sample.name == name)
            .map(|sample| sample.value)
            .sum()
    }

    /// The samples of `name`, in the order of the text.
    fn all(&self, name: &str) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|sample| sample.name == name)
            .collect()
    }
}

/// Parses `name{key="value",...} value`: labels optional, label values with
/// the format's escapes (`\\`, `\"`, `\n`).
fn parse_sample(line: &str) -> Sample {
    let name_end = line
        .find(['{', ' '])
        .unwrap_or_else(|| panic!("no value in {line:?}"));
    let name = line[..name_end].to_owned();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(inside) = rest.strip_prefix('{') {
        let mut chars = inside.char_indices();
        let mut key = String::new();
        let mut end = None;
        while let Some((index, c)) = chars.next() {
            match c {
                '}' => {
                    end = Some(index + 1);
                    break;
                }
                ',' => {}
                '=' => {
                    assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line:?}");
                    let mut value = String::new();
                    loop {
                        match chars.next().map(|(_, c)| c) {
                            Some('"') => break,
                            Some('\\') => match chars.next().map(|(_, c)| c) {
                                Some('n') => value.push('\n'),
                                Some(escaped) => value.push(escaped),
                                None => panic!("unterminated label value in {line:?}"),
                            },
                            Some(other) => value.push(other),
                            None => panic!("unterminated label value in {line:?}"),
                        }
                    }
                    labels.insert(std::mem::take(&mut key), value);
                }
                other => key.push(other),
            }
        }
        let end = end.unwrap_or_else(|| panic!("unterminated labels in {line:?}"));
        rest = &inside[end..];
    }
    let value = rest
        .trim()
        .parse::<f64>()
        .unwrap_or_else(|err| panic!("bad value in {line:?}: {err}"));
    Sample {
        name,
        labels,
        value,
    }
}

/// Scrapes `/metrics` with the token.
async fn scrape(server: &Server) -> Scrape {
    let response = server
        .request(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/plain; version=0.0.4"
    );
    Scrape::parse(response.text().await.unwrap())
}

/// Scrapes until `done` holds; panics after 30 s.
async fn until_scrape(server: &Server, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let scrape = scrape(server).await;
        if done(&scrape) {
            return scrape;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; the last scrape:\n{}",
            scrape.text
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A scrape during which the log held still, and the log's records then:
/// what the gauges are checked against, read from the log itself rather
/// than from the runtime the exporter asks.
async fn steady_scrape(server: &Server) -> (Scrape, Vec<RecordedEvent>) {
    for _ in 0..200 {
        let before = server.head();
        let scrape = scrape(server).await;
        if server.head() == before {
            let records: Vec<RecordedEvent> = server
                .log
                .read_all(1)
                .map(|record| record.expect("the log reads back"))
                .collect();
            if records.len() as u64 == before {
                return (scrape, records);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the log never held still for a scrape");
}

/// Starts a child of `root` with `spec`: the status and the answer.
async fn start(server: &Server, root: &str, spec: &Value) -> (u16, Value) {
    server
        .post(&format!("/v1/roots/{root}/children"), spec)
        .await
}

/// No token, a wrong one, or one without its scheme: the answer of any
/// other route without the token.
async fn refused_without_the_token(server: &Server) {
    let usual = answer(
        server
            .client
            .get(format!("{}/v1/roots", server.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (usual.0, usual.1["code"].as_str()),
        (401, Some("gateway/unauthenticated")),
        "{usual:?}"
    );
    let url = format!("{}/metrics", server.base);
    let bare = server.client.get(url.as_str()).send().await.unwrap();
    assert_eq!(
        bare.headers()
            .get("www-authenticate")
            .map(|value| value.to_str().unwrap()),
        Some("Bearer")
    );
    assert_eq!(answer(bare).await, usual);
    for wrong in [
        "Bearer nope".to_owned(),
        format!("Bearer {TOKEN}x"),
        TOKEN.to_owned(),
    ] {
        let response = server
            .client
            .get(url.as_str())
            .header("authorization", wrong.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(answer(response).await, usual, "{wrong:?}");
    }
}

#[tokio::test]
async fn a_scrape_reports_a_known_workload_exactly() {
    let broken = Script {
        turns: vec![vec![Step::Fail("the scripted failure".into())]],
    };
    let server = Server::scripted(ScriptedHost::showcase().with("broken", broken)).await;
    refused_without_the_token(&server).await;

    let root = server.open_root().await;
    let children = [
        (server.start_child(&root, "first").await, "completed"),
        (server.start_child(&root, "second").await, "completed"),
        (server.start_child(&root, "broken").await, "error"),
    ];
    let prompt = json!([{"type": "text", "text": "begin"}]);
    // Refused by the runtime before any command: not a refused command.
    let unknown = json!({
        "provider": "nobody", "label": "lost", "delivery": "parent",
        "request": {"prompt": prompt},
    });
    let (status, body) = start(&server, &root, &unknown).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("subagent/unknown-provider")),
        "{body}"
    );
    // Refused by the engine's rules: a child of the root is at depth 1.
    let too_deep = json!({
        "provider": "spawn", "label": "deep", "delivery": "parent",
        "request": {"prompt": prompt, "maxDepth": 0},
    });
    let (status, body) = start(&server, &root, &too_deep).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (422, Some("subagent/depth-exceeded")),
        "{body}"
    );
    for (child, stop_reason) in &children {
        let records = server
            .until_transcript(child, "the child's settlement", |records| {
                has(records, "ActivationSettled")
            })
            .await;
        let settled = records
            .iter()
            .find(|record| record["event"]["type"] == "ActivationSettled")
            .unwrap();
        assert_eq!(
            settled["event"]["data"]["result"]["stopReason"],
            *stop_reason
        );
    }
    // A settlement is counted once it is durable, a moment after it can be
    // read: wait for the three.
    until_scrape(&server, "three settlements", |scrape| {
        scrape.total(metric::SETTLES) >= 3.0
    })
    .await;

    let mut stream = server
        .request(reqwest::Method::GET, "/v1/events")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    read_sse(&mut stream, |frames| {
        frames.iter().any(|frame| frame.event == "caught-up")
    })
    .await;
    let (scrape, records) = steady_scrape(&server).await;

    // Counters: exact.
    let mode = |value| [(metric::LABEL_MODE, value)];
    let reason = |value| [(metric::LABEL_STOP_REASON, value)];
    let code = |value| [(metric::LABEL_CODE, value)];
    assert_eq!(scrape.get(metric::STARTS, &mode("continuable")), 3.0);
    assert_eq!(scrape.value(metric::STARTS, &mode("external")), None);
    assert_eq!(scrape.get(metric::SETTLES, &reason("completed")), 2.0);
    assert_eq!(scrape.get(metric::SETTLES, &reason("error")), 1.0);
    assert_eq!(scrape.total(metric::SETTLES), 3.0, "{}", scrape.text);
    assert_eq!(
        scrape.get(metric::REFUSALS, &code("subagent/depth-exceeded")),
        1.0
    );
    // A refusal before any command (the unknown provider) is counted by
    // `start_activation`, one by the rules by the engine: each once.
    assert_eq!(
        scrape.value(metric::REFUSALS, &code("subagent/unknown-provider")),
        Some(1.0),
        "{}",
        scrape.text
    );
    for name in [metric::STARTS, metric::SETTLES, metric::REFUSALS] {
        assert_eq!(scrape.types[name], "counter", "{name}");
    }

    // Gauges: the workload's exact figures. The three children settled
    // and none was disposed, so each keeps its live (idle) activation; no
    // external run was started.
    assert_eq!(
        scrape.get(metric::LIVE_ACTIVATIONS, &mode("continuable")),
        3.0,
        "{}",
        scrape.text
    );
    assert_eq!(
        scrape.get(metric::LIVE_ACTIVATIONS, &mode("external")),
        0.0,
        "{}",
        scrape.text
    );
    // The log's own figures, read from the log: its head is its last
    // record's position, and the checkpoint's age counts the records after
    // the stored checkpoint (all of them when none is stored).
    let head = records.last().map_or(0, |record| record.position);
    assert!(head > 0);
    assert_eq!(scrape.get(metric::LOG_HEAD, &[]), head as f64);
    let checkpointed = server
        .log
        .read_checkpoint(checkpoint::CHECKPOINT_NAME)
        .expect("the checkpoint reads")
        .map_or(0, |stored| {
            checkpoint::decode(&stored)
                .expect("the stored checkpoint decodes")
                .position
        });
    let age = records
        .iter()
        .filter(|record| record.position > checkpointed)
        .count();
    assert_eq!(scrape.get(metric::CHECKPOINT_AGE_EVENTS, &[]), age as f64);
    assert_eq!(scrape.get(metric::SSE_SUBSCRIBERS, &[]), 1.0);
    for name in [
        metric::LIVE_ACTIVATIONS,
        metric::LOG_HEAD,
        metric::CHECKPOINT_AGE_EVENTS,
        metric::SSE_SUBSCRIBERS,
    ] {
        assert_eq!(scrape.types[name], "gauge", "{name}");
    }

    // The append latency: a histogram with the gateway's buckets.
    let appends = metric::APPEND_SECONDS;
    assert_eq!(scrape.types[appends], "histogram");
    let count = scrape.get(&format!("{appends}_count"), &[]);
    assert!(count > 0.0, "{}", scrape.text);
    let buckets = scrape.all(&format!("{appends}_bucket"));
    let bounds: Vec<&str> = buckets
        .iter()
        .map(|bucket| bucket.labels["le"].as_str())
        .collect();
    assert_eq!(
        bounds.join(" "),
        "0.0001 0.00025 0.0005 0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2 +Inf"
    );
    assert!(buckets.windows(2).all(|w| w[0].value <= w[1].value));
    assert_eq!(buckets.last().map(|bucket| bucket.value), Some(count));
    // The log writers record the group size; when they do, it is a
    // histogram too.
    if let Some(kind) = scrape.types.get(metric::GROUP_SIZE) {
        assert_eq!(kind, "histogram");
    }
    // Every metric family is described.
    for name in scrape.types.keys() {
        assert!(scrape.helps.contains_key(name), "no HELP for {name}");
    }

    // A client that goes away is no longer counted.
    drop(stream);
    until_scrape(&server, "the closed stream to be uncounted", |scrape| {
        scrape.value(metric::SSE_SUBSCRIBERS, &[]) == Some(0.0)
    })
    .await;
}
