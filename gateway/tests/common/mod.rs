//! The gateway's test fixture: a runtime over an in-memory log with the
//! scripted host and the `spawn` and `process` providers, served by the
//! real router on a fresh 127.0.0.1 port, and a client that speaks to it
//! over real HTTP with the token.
// Each test binary uses only some of it.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use subagent_gateway::{GatewayConfig, Limits, Token, TokenSource};
use subagent_runtime::providers::{ProcessProvider, SpawnProvider};
use subagent_runtime::{CapacityLimits, ScriptedHost, SubagentRuntime};
use subagent_store::{EventLog, MemoryLog};
use tokio_util::sync::CancellationToken;

/// The token every fixture server accepts.
pub(crate) const TOKEN: &str = "test-token-0123456789abcdef0123456789abcdef";

/// The origin every fixture server allows besides none.
pub(crate) const ALLOWED_ORIGIN: &str = "http://console.test:7878";

/// A served gateway.
pub(crate) struct Server {
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    pub(crate) runtime: SubagentRuntime,
    pub(crate) log: Arc<dyn EventLog>,
    pub(crate) client: reqwest::Client,
    shutdown: CancellationToken,
}

/// The agents of `subagents serve` ([`ScriptedHost::showcase`]).
pub(crate) fn scripts() -> ScriptedHost {
    ScriptedHost::showcase()
}

impl Server {
    /// A server with the default limits and no capacity limits.
    pub(crate) async fn start() -> Server {
        Server::with(Limits::default(), CapacityLimits::default()).await
    }

    /// A server with these limits.
    pub(crate) async fn with(limits: Limits, capacity: CapacityLimits) -> Server {
        Server::over(Arc::new(MemoryLog::new()), limits, capacity).await
    }

    /// A server over `log`.
    pub(crate) async fn over(
        log: Arc<dyn EventLog>,
        limits: Limits,
        capacity: CapacityLimits,
    ) -> Server {
        Server::hosting(log, scripts(), limits, capacity).await
    }

    /// A server whose children play `host`'s scripts, with the default
    /// limits.
    pub(crate) async fn scripted(host: ScriptedHost) -> Server {
        Server::hosting(
            Arc::new(MemoryLog::new()),
            host,
            Limits::default(),
            CapacityLimits::default(),
        )
        .await
    }

    /// A server over `log` whose children play `host`'s scripts.
    pub(crate) async fn hosting(
        log: Arc<dyn EventLog>,
        host: ScriptedHost,
        limits: Limits,
        capacity: CapacityLimits,
    ) -> Server {
        let shared = Arc::clone(&log);
        let (runtime, _) = SubagentRuntime::open_with(shared, Arc::new(host), capacity)
            .await
            .expect("runtime opens");
        runtime
            .register_provider(Arc::new(SpawnProvider))
            .await
            .unwrap();
        runtime
            .register_provider(Arc::new(ProcessProvider::new(
                "process",
                "sh",
                &["-c", "tr a-z A-Z"],
            )))
            .await
            .unwrap();
        let shutdown = CancellationToken::new();
        let router = subagent_gateway::router(
            runtime.clone(),
            GatewayConfig {
                token: Token::new(TOKEN, TokenSource::Given).unwrap(),
                allowed_origins: vec![ALLOWED_ORIGIN.into()],
                limits,
            },
            shutdown.clone(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let serving = shutdown.clone();
        let served = runtime.clone();
        tokio::spawn(async move {
            let _ =
                subagent_gateway::serve(listener, router, served, serving.clone(), async move {
                    serving.cancelled().await;
                })
                .await;
        });
        Server {
            base,
            runtime,
            log,
            client: reqwest::Client::new(),
            shutdown,
        }
    }

    /// A request to `path` with the token.
    pub(crate) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
    }

    /// POSTs `body` as JSON with the token: the status and the JSON answer
    /// (`null` for an empty one).
    pub(crate) async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        answer(
            self.request(reqwest::Method::POST, path)
                .json(body)
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// GETs `path` with the token.
    pub(crate) async fn get(&self, path: &str) -> (u16, Value) {
        answer(
            self.request(reqwest::Method::GET, path)
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// DELETEs `path` with the token.
    pub(crate) async fn delete(&self, path: &str) -> (u16, Value) {
        answer(
            self.request(reqwest::Method::DELETE, path)
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// Opens a root over HTTP: its id.
    pub(crate) async fn open_root(&self) -> String {
        let (status, body) = self.post("/v1/roots", &json!({"label": "host"})).await;
        assert_eq!(status, 201, "{body}");
        body["sessionId"].as_str().unwrap().to_owned()
    }

    /// Starts a `spawn` child of `root` labelled `label` over HTTP: its id.
    pub(crate) async fn start_child(&self, root: &str, label: &str) -> String {
        self.start_with(root, "spawn", label).await
    }

    /// Starts a child with `provider`: its id.
    pub(crate) async fn start_with(&self, root: &str, provider: &str, label: &str) -> String {
        let (status, body) = self
            .post(
                &format!("/v1/roots/{root}/children"),
                &json!({
                    "provider": provider,
                    "label": label,
                    "request": {"prompt": [{"type": "text", "text": "begin"}]},
                    "delivery": "parent",
                }),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body["childId"].as_str().unwrap().to_owned()
    }

    /// Polls the transcript of `session` until `done` holds for its
    /// records; panics after 10 s.
    pub(crate) async fn until_transcript(
        &self,
        session: &str,
        what: &str,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (status, page) = self
                .get(&format!("/v1/sessions/{session}/transcript"))
                .await;
            assert_eq!(status, 200, "{page}");
            let records = page["records"].as_array().cloned().unwrap_or_default();
            if done(&records) {
                return records;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The log's head.
    pub(crate) fn head(&self) -> u64 {
        self.log.head()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The status and JSON body of `response` (`null` when empty).
pub(crate) async fn answer(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let bytes = response.bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    (status, body)
}

/// Whether `records` hold an event of type `kind`.
pub(crate) fn has(records: &[Value], kind: &str) -> bool {
    records.iter().any(|record| record["event"]["type"] == kind)
}

/// The number of events of type `kind` in `records`.
pub(crate) fn count(records: &[Value], kind: &str) -> usize {
    records
        .iter()
        .filter(|record| record["event"]["type"] == kind)
        .count()
}

/// A `prompt` request body.
pub(crate) fn prompt(child: &str, parent: &str, request_id: &str, text: &str) -> Value {
    json!({
        "address": {"childSessionId": child, "parentSessionId": parent, "mode": "continuable"},
        "delivery": "queue",
        "requestId": request_id,
        "content": [{"type": "text", "text": text}],
    })
}

/// One Server-Sent Event as the stream framed it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sse {
    /// `id:`, when present.
    pub(crate) id: Option<u64>,
    /// `event:`.
    pub(crate) event: String,
    /// `data:` as JSON.
    pub(crate) data: Value,
}

/// Reads SSE frames from `response` until `done` holds for the frames read
/// so far; panics after 10 s.
pub(crate) async fn read_sse(
    response: &mut reqwest::Response,
    done: impl Fn(&[Sse]) -> bool,
) -> Vec<Sse> {
    let mut frames = Vec::new();
    let mut buffer = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done(&frames) {
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .expect("timed out reading the event stream")
            .expect("the event stream reads")
            .expect("the event stream stays open");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let mut sse = Sse {
                id: None,
                event: "message".into(),
                data: Value::Null,
            };
            let mut data = String::new();
            for line in frame.lines() {
                if let Some(id) = line.strip_prefix("id:") {
                    sse.id = Some(id.trim().parse().unwrap());
                } else if let Some(event) = line.strip_prefix("event:") {
                    sse.event = event.trim().to_owned();
                } else if let Some(part) = line.strip_prefix("data:") {
                    data.push_str(part.trim_start());
                }
            }
            // Keep-alive comments carry no data.
            if !data.is_empty() {
                sse.data = serde_json::from_str(&data).unwrap();
                frames.push(sse);
            }
        }
    }
    frames
}
