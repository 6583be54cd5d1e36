//! `demo --otel-endpoint`: the real binary exports its spans over OTLP/HTTP
//! to a collector this test runs on 127.0.0.1, and the spans it receives
//! are the demo's tree: one trace for the root, every activation under its
//! parent session's span, exactly the tree the log alone rebuilds
//! (`subagent_replay::spans`), and every message delivery in the same
//! trace. Without the flag nothing is sent.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use subagent_core::telemetry::{attr, span};
use subagent_store::{EventLogExt, RocksLog, RocksOptions};

use common::{binary, root_of, text};

/// What the collector received: each request's content type and body.
type Received = Arc<Mutex<Vec<(String, Bytes)>>>;

/// A collector on a private port that keeps every OTLP/HTTP traces request.
async fn collector() -> (String, Received, tokio::task::JoinHandle<()>) {
    let received: Received = Arc::default();
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(
                |State(received): State<Received>, headers: HeaderMap, body: Bytes| async move {
                    let kind = headers
                        .get("content-type")
                        .and_then(|value| value.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    received.lock().unwrap().push((kind, body));
                    StatusCode::OK
                },
            ),
        )
        .with_state(Arc::clone(&received));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (url, received, server)
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.clone())
        .map(|value| match value {
            Value::StringValue(text) => text,
            Value::IntValue(number) => number.to_string(),
            other => format!("{other:?}"),
        })
}

async fn run_demo(dir: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut command = binary();
    command
        .args(["demo", "--data", dir.to_str().unwrap()])
        .args(extra)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED");
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_exports_its_tree_of_spans_over_otlp() {
    let (url, received, server) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let output = run_demo(&data, &["--otel-endpoint", &url]).await;
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "demo failed: {stderr}");
    assert!(
        !stderr.contains("exporting the last spans failed"),
        "{stderr}"
    );
    let root = root_of(&stdout);

    let requests = received.lock().unwrap().clone();
    assert!(!requests.is_empty(), "the collector received spans");
    let mut spans: Vec<Span> = Vec::new();
    for (kind, body) in &requests {
        assert_eq!(kind, "application/x-protobuf");
        let request = ExportTraceServiceRequest::decode(body.as_ref()).expect("OTLP protobuf");
        for resource in request.resource_spans {
            let service = resource
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
                .and_then(|kv| kv.value.as_ref()?.value.clone());
            assert_eq!(service, Some(Value::StringValue("subagents".into())));
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    let by_id: HashMap<Vec<u8>, &Span> = spans.iter().map(|s| (s.span_id.clone(), s)).collect();

    // The binary exports through the project's layer
    // (`subagent_runtime::otel`): no attribute the layer adds by itself.
    for s in &spans {
        let added: Vec<&str> = s
            .attributes
            .iter()
            .map(|kv| kv.key.as_str())
            .filter(|key| subagent_runtime::otel::added_by_layer_defaults(key))
            .collect();
        assert!(added.is_empty(), "{} carries {added:?}", s.name);
    }

    // One trace for the root, its create_agent span at the top.
    let root_spans: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == format!("{} demo root", span::CREATE_AGENT))
        .collect();
    assert_eq!(root_spans.len(), 1, "one create_agent span for the root");
    let root_span = root_spans[0];
    assert!(
        root_span.parent_span_id.is_empty(),
        "the root's span starts its trace"
    );
    assert_eq!(attribute(root_span, attr::AGENT_ID), Some(root.clone()));
    for s in spans
        .iter()
        .filter(|s| attribute(s, attr::CONVERSATION_ID).as_deref() == Some(root.as_str()))
    {
        assert_eq!(
            s.trace_id, root_span.trace_id,
            "{} is in the root's trace",
            s.name
        );
    }

    // The demo's host sends messages from no span of its own: each
    // delivery is still in the root's trace, not a trace of its own.
    let deliveries: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == span::DELIVER_MESSAGE)
        .collect();
    assert!(!deliveries.is_empty(), "the demo's messages were exported");
    for delivery in &deliveries {
        assert_eq!(
            attribute(delivery, attr::CONVERSATION_ID),
            Some(root.clone())
        );
        assert_eq!(delivery.trace_id, root_span.trace_id);
        assert!(
            by_id.contains_key(&delivery.parent_span_id),
            "a delivery's parent is a span of the tree"
        );
    }

    // The tree the log records, rebuilt without the exporter, is what was
    // exported: same spans, same parents.
    let log = RocksLog::open(&data, RocksOptions::default()).unwrap();
    let records: Vec<_> = log.read_all(1).map(Result::unwrap).collect();
    let rebuilt = subagent_replay::spans(&records);
    let activations = rebuilt
        .iter()
        .filter(|s| {
            matches!(
                s.kind,
                subagent_replay::SpanKind::Activation { .. } | subagent_replay::SpanKind::Run
            )
        })
        .count();
    // research, review, fact-check, shout, and the cold-resumed ones.
    assert!(activations >= 4, "{activations} activations rebuilt");
    for expected in &rebuilt {
        let exported = by_id
            .get(expected.context.span_id.as_slice())
            .unwrap_or_else(|| panic!("{:?} of {} was exported", expected.kind, expected.session));
        assert_eq!(exported.trace_id, expected.context.trace_id.to_vec());
        let parent = expected
            .parent_span_id
            .map(|id| id.to_vec())
            .unwrap_or_default();
        assert_eq!(
            exported.parent_span_id, parent,
            "{:?} of {}",
            expected.kind, expected.session
        );
    }

    // Shaped like `subagents tree`: each child session's first activation
    // nests under its parent session's span.
    let state = subagent_replay::state_at(&log, None).unwrap();
    for entry in state.list_descendants(root.parse().unwrap()) {
        let label = entry.entry.entry.label.clone();
        let child = entry.entry.entry.child_id.to_string();
        let parent = entry.parent_id.to_string();
        let first = spans
            .iter()
            .filter(|s| {
                (s.name.starts_with(span::ACTIVATION) || s.name.starts_with(span::RUN))
                    && attribute(s, attr::AGENT_ID).as_deref() == Some(child.as_str())
            })
            .min_by_key(|s| s.start_time_unix_nano)
            .unwrap_or_else(|| panic!("{label} has an activation span"));
        let mut up = by_id.get(&first.parent_span_id).copied();
        let owner = loop {
            let Some(candidate) = up else {
                panic!("{label} is not nested under a session")
            };
            if candidate.name.starts_with(span::ACTIVATION)
                || candidate.name.starts_with(span::CREATE_AGENT)
            {
                break candidate;
            }
            up = by_id.get(&candidate.parent_span_id).copied();
        };
        assert_eq!(
            attribute(owner, attr::AGENT_ID),
            Some(parent),
            "{label} nests under its parent"
        );
    }
    // Turns and tool calls carry the GenAI names.
    assert!(spans.iter().any(|s| s.name.starts_with("invoke_agent ")
        && attribute(s, attr::OPERATION_NAME).as_deref() == Some("invoke_agent")));
    assert!(spans
        .iter()
        .any(|s| s.name.starts_with("execute_tool ") && attribute(s, attr::TOOL_NAME).is_some()));
    drop(log);

    // Without the flag, nothing is sent.
    let before = received.lock().unwrap().len();
    let quiet = run_demo(&dir.path().join("quiet"), &[]).await;
    assert!(quiet.status.success());
    assert_eq!(
        received.lock().unwrap().len(),
        before,
        "no export without the flag"
    );
    server.abort();
}

#[test]
fn an_unusable_endpoint_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let output = binary()
        .args([
            "demo",
            "--data",
            data.to_str().unwrap(),
            "--otel-endpoint",
            "not a url",
        ])
        .output()
        .unwrap();
    let (_, stderr) = text(&output);
    assert!(!output.status.success());
    assert!(stderr.starts_with("error: --otel-endpoint: "), "{stderr}");
    assert!(!data.exists(), "nothing was recorded");
}
