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
        let runtime = open_runtime(Arc::clone(&log), host, capacity)
            .await
            .expect("runtime opens");
        Server::serving(log, runtime.clone(), runtime.into(), limits).await
    }

    /// A server over `log` whose runtime is reopened after the log fails
    /// (as `subagents serve` runs it), quickly: 20 ms doubling to 100 ms.
    pub(crate) async fn supervised(log: Arc<dyn EventLog>) -> Server {
        let runtime = open_runtime(Arc::clone(&log), scripts(), CapacityLimits::default())
            .await
            .expect("runtime opens");
        let reopened = Arc::clone(&log);
        let reopen: subagent_runtime::supervisor::Reopen = Arc::new(move || {
            let log = Arc::clone(&reopened);
            Box::pin(open_runtime(log, scripts(), CapacityLimits::default()))
        });
        let policy = subagent_runtime::RecoveryPolicy {
            first_delay: std::time::Duration::from_millis(20),
            max_delay: std::time::Duration::from_millis(100),
            give_up_after: std::time::Duration::from_secs(60),
        };
        let supervised = subagent_runtime::Supervised::new(runtime.clone(), reopen, policy);
        Server::serving(log, runtime, supervised, Limits::default()).await
    }

    /// Serves `supervised` (whose first runtime is `runtime`, over `log`).
    async fn serving(
        log: Arc<dyn EventLog>,
        runtime: SubagentRuntime,
        supervised: subagent_runtime::Supervised,
        limits: Limits,
    ) -> Server {
        let shutdown = CancellationToken::new();
        let router = subagent_gateway::router(
            supervised.clone(),
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
        let served = supervised;
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

    /// `GET path`'s status, without the token.
    pub(crate) async fn status_of(&self, path: &str) -> u16 {
        self.client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .map_or(0, |response| response.status().as_u16())
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

    /// Sends `request` as it is over a new TCP connection, writing beside
    /// reading (the server may answer before it read everything, and the
    /// write's failure is ignored), and reads until the server closes the
    /// connection: every answer read, in order. Panics if the connection
    /// is reset or not closed within 10 s, or on bytes that are not whole
    /// answers framed by `content-length`.
    pub(crate) async fn raw(&self, request: Vec<u8>) -> Vec<RawAnswer> {
        let address = self.base.trim_start_matches("http://");
        let stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let (mut reading, mut writing) = stream.into_split();
        let writer = tokio::spawn(async move {
            let _ = tokio::io::AsyncWriteExt::write_all(&mut writing, &request).await;
            // Keep the write side open: the server, not the client, closes.
            std::future::pending::<()>().await;
        });
        let mut bytes = Vec::new();
        let read = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::io::AsyncReadExt::read_to_end(&mut reading, &mut bytes),
        )
        .await;
        writer.abort();
        read.unwrap_or_else(|_| {
            panic!(
                "the server did not close the connection within 10 s, after {:?}",
                String::from_utf8_lossy(&bytes)
            )
        })
        .unwrap_or_else(|err| {
            panic!(
                "the connection failed ({err}) after {:?}",
                String::from_utf8_lossy(&bytes)
            )
        });
        RawAnswer::all(&bytes)
    }
}

/// One answer read off a raw connection ([`Server::raw`]).
#[derive(Debug)]
pub(crate) struct RawAnswer {
    /// The status line, without its line end.
    pub(crate) status_line: String,
    /// The status.
    pub(crate) status: u16,
    /// The headers, names in lower case, in order.
    pub(crate) headers: Vec<(String, String)>,
    /// The body, as JSON (a string when it is not).
    pub(crate) body: Value,
}

impl RawAnswer {
    /// Every answer in `bytes`, each framed by its `content-length`.
    fn all(mut bytes: &[u8]) -> Vec<RawAnswer> {
        let mut answers = Vec::new();
        while !bytes.is_empty() {
            let end = bytes
                .windows(4)
                .position(|window| window == b"\r\n\r\n")
                .unwrap_or_else(|| {
                    panic!("an unfinished head: {:?}", String::from_utf8_lossy(bytes))
                });
            let text = String::from_utf8_lossy(&bytes[..end]).into_owned();
            let mut lines = text.split("\r\n");
            let status_line = lines.next().unwrap().to_owned();
            let status = status_line
                .get(9..12)
                .and_then(|status| status.parse().ok())
                .unwrap_or_else(|| panic!("not a status line: {status_line:?}"));
            let headers: Vec<(String, String)> = lines
                .map(|line| {
                    let (name, value) = line.split_once(':').unwrap();
                    (name.to_ascii_lowercase(), value.trim().to_owned())
                })
                .collect();
            let length: usize = headers
                .iter()
                .find(|(name, _)| name == "content-length")
                .unwrap_or_else(|| panic!("no content-length: {text:?}"))
                .1
                .parse()
                .unwrap();
            let body = bytes
                .get(end + 4..end + 4 + length)
                .unwrap_or_else(|| panic!("a body shorter than its content-length: {text:?}"));
            let body = serde_json::from_slice(body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
            answers.push(RawAnswer {
                status_line,
                status,
                headers,
                body,
            });
            bytes = &bytes[end + 4 + length..];
        }
        answers
    }

    /// The value of the header `name` (lower case), if it appears once;
    /// panics if it appears more than once.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        let mut values = self.headers.iter().filter(|(n, _)| n == name);
        let first = values.next().map(|(_, value)| value.as_str());
        assert!(values.next().is_none(), "{name} twice in {self:?}");
        first
    }

    /// Asserts that this is the gateway's JSON refusal with `status` and
    /// `code`, closing the connection, and returns its message.
    pub(crate) fn refusal(&self, status: u16, code: &str) -> String {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{self:?}"
        );
        assert_eq!(self.header("connection"), Some("close"), "{self:?}");
        assert_eq!(self.body["code"], code, "{self:?}");
        let message = self.body["message"].as_str().unwrap_or_default().to_owned();
        assert!(!message.is_empty(), "{self:?}");
        message
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

/// A runtime over `log` with the `spawn` and `process` providers.
async fn open_runtime(
    log: Arc<dyn EventLog>,
    host: ScriptedHost,
    capacity: CapacityLimits,
) -> Result<SubagentRuntime, subagent_core::SubagentError> {
    let (runtime, _) = SubagentRuntime::open_with(log, Arc::new(host), capacity).await?;
    runtime.register_provider(Arc::new(SpawnProvider)).await?;
    runtime
        .register_provider(Arc::new(ProcessProvider::new(
            "process",
            "sh",
            &["-c", "tr a-z A-Z"],
        )))
        .await?;
    Ok(runtime)
}
