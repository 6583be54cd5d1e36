//! `subagents-acp-test-agent`: the deterministic ACP test agent. A real
//! agent-side ACP (protocol v1) peer over stdio — `initialize`,
//! `session/new`, `session/load`, `session/prompt`, `session/cancel` — whose
//! every turn is played from a JSON script (see `subagent_acp::script`).
//! Stdout carries only JSON-RPC; diagnostics go to stderr.
//!
//! ```text
//! subagents-acp-test-agent --script FILE [--sessions DIR]
//! ```
//!
//! A missing, unreadable or bad script is one `error: ...` line on stderr
//! and exit status 2. The agent exits 0 when stdin closes, and 3 on a
//! script's `crash` step. With `--sessions`, each session is persisted as
//! `DIR/<id>.json`, and `session/load` (advertised when the script sets
//! `loadSession`) replays it.

mod store;
mod turn;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::{self, schema};
use agent_client_protocol::{Agent, Client, Error, Lines};
use futures::{SinkExt as _, StreamExt as _};
use subagent_acp::script::AgentScript;
use tokio::io::AsyncWriteExt as _;
use tokio_util::codec::{FramedRead, LinesCodec};
use tokio_util::sync::CancellationToken;

use crate::store::{Entry, Role, SessionRecord, SessionStore};
use crate::turn::{Ending, FsAccess, Turn};

const AGENT_NAME: &str = "subagents-acp-test-agent";
const USAGE: &str = "usage: subagents-acp-test-agent --script FILE [--sessions DIR]";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) => return usage_error(&message),
    };
    let script = match std::fs::read_to_string(&options.script) {
        Ok(json) => json,
        Err(err) => {
            return usage_error(&format!(
                "cannot read script {}: {err}",
                options.script.display()
            ))
        }
    };
    let script = match AgentScript::parse(&script) {
        Ok(script) => script,
        Err(err) => return usage_error(&format!("bad script {}: {err}", options.script.display())),
    };
    if let Some(dir) = &options.sessions {
        if let Err(err) = std::fs::create_dir_all(dir) {
            return usage_error(&format!(
                "cannot create sessions directory {}: {err}",
                dir.display()
            ));
        }
    }
    let (raw, lines) = futures::channel::mpsc::unbounded();
    tokio::spawn(write_lines(lines));
    match TestAgent::new(script, SessionStore::new(options.sessions), raw)
        .serve()
        .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

/// The command line.
#[derive(Debug)]
struct Options {
    script: PathBuf,
    sessions: Option<PathBuf>,
}

impl Options {
    /// Parses `--script FILE [--sessions DIR]` (either also as `--flag=value`).
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
        let mut script = None;
        let mut sessions = None;
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => {
                    (flag.to_owned(), Some(value.to_owned()))
                }
                _ => (arg.clone(), None),
            };
            let slot = match flag.as_str() {
                "--script" => &mut script,
                "--sessions" => &mut sessions,
                other => return Err(format!("unknown argument {other:?}; {USAGE}")),
            };
            let value = match inline {
                Some(value) => value,
                None => args
                    .next()
                    .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))?,
            };
            *slot = Some(PathBuf::from(value));
        }
        let script = script.ok_or_else(|| format!("--script is required; {USAGE}"))?;
        Ok(Options { script, sessions })
    }
}

/// The agent: its script, its sessions, and what the client can do. Cheap to
/// clone (one per handler).
#[derive(Clone)]
struct TestAgent {
    shared: Arc<Shared>,
}

struct Shared {
    script: AgentScript,
    store: SessionStore,
    /// Whether `loadSession` is advertised (and `session/load` served).
    load_session: bool,
    /// The client's file capabilities, from `initialize`.
    fs: Mutex<FsAccess>,
    /// Live sessions by id.
    sessions: Mutex<HashMap<String, LiveSession>>,
    /// The counter session ids are minted from.
    minted: AtomicU64,
    /// Stdout's lines, in order: the protocol's messages and the raw lines
    /// of `rawLine` and `longLine` steps.
    raw: RawLines,
}

/// Where lines for stdout go, in order.
pub(crate) type RawLines = futures::channel::mpsc::UnboundedSender<String>;

/// The protocol over stdio, its outgoing lines through `raw`'s channel
/// (written to stdout by a task of their own), so a script can write lines
/// the protocol library would never send, in order with its messages.
fn stdio_lines(
    raw: RawLines,
) -> Lines<
    impl futures::Sink<String, Error = std::io::Error> + Send + 'static,
    impl futures::Stream<Item = std::io::Result<String>> + Send + 'static,
> {
    let outgoing = raw.sink_map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe));
    let incoming = FramedRead::new(tokio::io::stdin(), LinesCodec::new())
        .map(|line| line.map_err(std::io::Error::other));
    Lines::new(outgoing, incoming)
}

/// Writes every line sent to `lines` to stdout, each with its newline,
/// until the channel closes or stdout does.
async fn write_lines(mut lines: futures::channel::mpsc::UnboundedReceiver<String>) {
    let mut stdout = tokio::io::stdout();
    while let Some(line) = lines.next().await {
        let written = async {
            stdout.write_all(line.as_bytes()).await?;
            stdout.write_all(b"\n").await?;
            stdout.flush().await
        };
        if written.await.is_err() {
            return;
        }
    }
}

/// A session this process serves.
struct LiveSession {
    record: SessionRecord,
    /// The working directory the client gave.
    cwd: PathBuf,
    /// The running (or last) turn's cancellation.
    cancel: CancellationToken,
}

impl TestAgent {
    fn new(script: AgentScript, store: SessionStore, raw: RawLines) -> Self {
        let load_session = script.load_session && store.persists();
        TestAgent {
            shared: Arc::new(Shared {
                script,
                store,
                load_session,
                fs: Mutex::new(FsAccess::default()),
                sessions: Mutex::new(HashMap::new()),
                minted: AtomicU64::new(0),
                raw,
            }),
        }
    }

    /// Serves ACP over stdio until stdin closes.
    async fn serve(self) -> Result<(), Error> {
        Agent
            .v1()
            .name(AGENT_NAME)
            .on_receive_request(
                {
                    let agent = self.clone();
                    async move |request: schema::InitializeRequest,
                                responder: v1::Responder<schema::InitializeResponse>,
                                cx: v1::ConnectionTo<Client>| {
                        agent.initialize(&request, responder, &cx)
                    }
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                {
                    let agent = self.clone();
                    async move |request: schema::NewSessionRequest,
                                responder: v1::Responder<schema::NewSessionResponse>,
                                cx: v1::ConnectionTo<Client>| {
                        agent.new_session(request, responder, &cx)
                    }
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                {
                    let agent = self.clone();
                    async move |request: schema::LoadSessionRequest,
                                responder: v1::Responder<schema::LoadSessionResponse>,
                                cx: v1::ConnectionTo<Client>| {
                        agent.load_session(request, responder, &cx)
                    }
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                {
                    let agent = self.clone();
                    async move |request: schema::PromptRequest,
                                responder: v1::Responder<schema::PromptResponse>,
                                cx: v1::ConnectionTo<Client>| {
                        agent.prompt(request, responder, &cx);
                        Ok(())
                    }
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_notification(
                {
                    let agent = self.clone();
                    async move |notification: schema::CancelNotification,
                                _cx: v1::ConnectionTo<Client>| {
                        agent.cancel(&notification.session_id);
                        Ok(())
                    }
                },
                agent_client_protocol::on_receive_notification!(),
            )
            .connect_to(stdio_lines(self.shared.raw.clone()))
            .await
    }

    /// `initialize`: remembers the client's file capabilities and answers
    /// (or, with `hangOnInitialize`, never answers).
    fn initialize(
        &self,
        request: &schema::InitializeRequest,
        responder: v1::Responder<schema::InitializeResponse>,
        cx: &v1::ConnectionTo<Client>,
    ) -> Result<(), Error> {
        let fs = &request.client_capabilities.fs;
        *lock(&self.shared.fs) = FsAccess {
            read: fs.read_text_file,
            write: fs.write_text_file,
        };
        if self.shared.script.hang_on_initialize {
            spawn_or_log(cx, hold(responder));
            return Ok(());
        }
        responder.respond(
            schema::InitializeResponse::new(ProtocolVersion::V1)
                .agent_capabilities(
                    schema::AgentCapabilities::new()
                        .load_session(self.shared.load_session)
                        .prompt_capabilities(schema::PromptCapabilities::new().image(true)),
                )
                .agent_info(schema::Implementation::new(
                    AGENT_NAME,
                    env!("CARGO_PKG_VERSION"),
                )),
        )
    }

    /// `session/new`: mints an id, reads the label from
    /// `_meta.subagents.label`, and persists the empty session.
    fn new_session(
        &self,
        request: schema::NewSessionRequest,
        responder: v1::Responder<schema::NewSessionResponse>,
        cx: &v1::ConnectionTo<Client>,
    ) -> Result<(), Error> {
        let record = SessionRecord {
            label: label_of(request.meta.as_ref()),
            turns_done: 0,
            transcript: Vec::new(),
        };
        let id = self.mint_id();
        if let Err(err) = self.shared.store.save(&id, &record) {
            return responder.respond_with_error(
                Error::internal_error().data(format!("cannot persist session {id}: {err}")),
            );
        }
        lock(&self.shared.sessions).insert(
            id.clone(),
            LiveSession {
                record,
                cwd: request.cwd,
                cancel: CancellationToken::new(),
            },
        );
        // Updates before the answer (as agents announce their commands).
        for n in 0..self.shared.script.updates_before_session {
            cx.send_notification(schema::SessionNotification::new(
                id.clone(),
                schema::SessionUpdate::AgentMessageChunk(schema::ContentChunk::new(
                    schema::ContentBlock::from(format!("before the session {n}").as_str()),
                )),
            ))?;
        }
        responder.respond(schema::NewSessionResponse::new(id))
    }

    /// A session id no live or persisted session has: `test-<pid>-<n>`.
    fn mint_id(&self) -> String {
        loop {
            let n = self.shared.minted.fetch_add(1, Ordering::Relaxed) + 1;
            let id = format!("test-{}-{n}", std::process::id());
            if !self.shared.store.exists(&id) && !lock(&self.shared.sessions).contains_key(&id) {
                return id;
            }
        }
    }

    /// `session/load`: replays the stored transcript as message chunks,
    /// then answers; the session's turns go on from the stored count.
    fn load_session(
        &self,
        request: schema::LoadSessionRequest,
        responder: v1::Responder<schema::LoadSessionResponse>,
        cx: &v1::ConnectionTo<Client>,
    ) -> Result<(), Error> {
        if !self.shared.load_session {
            return responder.respond_with_error(Error::method_not_found());
        }
        let id = request.session_id.0.to_string();
        let record = match self.shared.store.load(&id) {
            Ok(Some(record)) => record,
            Ok(None) => {
                return responder.respond_with_error(
                    schema::Error::session_not_found(request.session_id).into(),
                )
            }
            Err(err) => {
                return responder.respond_with_error(
                    Error::internal_error().data(format!("cannot read session {id}: {err}")),
                )
            }
        };
        for (index, entry) in record.transcript.iter().enumerate() {
            let chunk = schema::ContentChunk::new(schema::ContentBlock::from(entry.text.as_str()))
                .message_id(schema::MessageId::new(format!("replay-{index}")));
            let update = match entry.role {
                Role::User => schema::SessionUpdate::UserMessageChunk(chunk),
                Role::Assistant => schema::SessionUpdate::AgentMessageChunk(chunk),
            };
            cx.send_notification(schema::SessionNotification::new(
                request.session_id.clone(),
                update,
            ))?;
        }
        lock(&self.shared.sessions).insert(
            id,
            LiveSession {
                record,
                cwd: request.cwd,
                cancel: CancellationToken::new(),
            },
        );
        responder.respond(schema::LoadSessionResponse::new())
    }

    /// `session/prompt`: counts and records the turn, then plays it in a
    /// task of its own (the dispatch loop must stay free for the client's
    /// answers and `session/cancel`), which answers the prompt.
    fn prompt(
        &self,
        request: schema::PromptRequest,
        responder: v1::Responder<schema::PromptResponse>,
        cx: &v1::ConnectionTo<Client>,
    ) {
        let id = request.session_id.0.to_string();
        let user_text = turn::prompt_text(&request.prompt);
        let started = lock(&self.shared.sessions).get_mut(&id).map(|session| {
            session.record.turns_done += 1;
            if !user_text.is_empty() {
                session.record.transcript.push(Entry {
                    role: Role::User,
                    text: user_text,
                });
            }
            session.cancel = CancellationToken::new();
            (
                session.record.clone(),
                session.cwd.clone(),
                session.cancel.clone(),
            )
        });
        let Some((record, cwd, cancel)) = started else {
            answered(
                responder.respond_with_error(
                    schema::Error::session_not_found(request.session_id).into(),
                ),
            );
            return;
        };
        // Stored before the turn plays, so a crash mid-turn still counts it.
        self.persist(&id, &record);
        let number = record.turns_done;
        let steps = self
            .shared
            .script
            .for_label(record.label.as_deref())
            .turn(number)
            .to_vec();
        let turn = Turn {
            cx: cx.clone(),
            session_id: request.session_id,
            number,
            steps,
            prompt: request.prompt,
            cwd,
            fs: *lock(&self.shared.fs),
            cancel,
            raw: self.shared.raw.clone(),
        };
        let agent = self.clone();
        spawn_or_log(cx, async move {
            let outcome = turn.run().await;
            agent.finish_turn(&id, outcome.said);
            match outcome.ending {
                Ending::Stop(reason) => {
                    answered(responder.respond(schema::PromptResponse::new(reason)));
                    Ok(())
                }
                Ending::Fail(error) => {
                    answered(responder.respond_with_error(error));
                    Ok(())
                }
                Ending::Hang => hold(responder).await,
            }
        });
    }

    /// Records what a turn said and persists the session.
    fn finish_turn(&self, id: &str, said: Vec<String>) {
        let record = {
            let mut sessions = lock(&self.shared.sessions);
            let Some(session) = sessions.get_mut(id) else {
                return;
            };
            session
                .record
                .transcript
                .extend(said.into_iter().map(|text| Entry {
                    role: Role::Assistant,
                    text,
                }));
            session.record.clone()
        };
        self.persist(id, &record);
    }

    /// `session/cancel`: cancels the session's running turn, if any.
    fn cancel(&self, session_id: &schema::SessionId) {
        if let Some(session) = lock(&self.shared.sessions).get(&*session_id.0) {
            session.cancel.cancel();
        }
    }

    fn persist(&self, id: &str, record: &SessionRecord) {
        if let Err(err) = self.shared.store.save(id, record) {
            eprintln!("{AGENT_NAME}: cannot persist session {id}: {err}");
        }
    }
}

/// The session label in a `session/new` `_meta`: `{"subagents": {"label": ..}}`.
fn label_of(meta: Option<&schema::Meta>) -> Option<String> {
    meta?
        .get("subagents")?
        .get("label")?
        .as_str()
        .map(str::to_owned)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps `held` (a responder) alive and unanswered for as long as the
/// connection lasts.
async fn hold<T: Send>(held: T) -> Result<(), Error> {
    let _held = held;
    std::future::pending().await
}

/// Runs `task` on the connection. A task never fails (that would end the
/// connection): answers go through responders, failures to stderr.
fn spawn_or_log(
    cx: &v1::ConnectionTo<Client>,
    task: impl Future<Output = Result<(), Error>> + Send + 'static,
) {
    if let Err(err) = cx.spawn(task) {
        eprintln!("{AGENT_NAME}: cannot start a task: {err}");
    }
}

/// Logs a failure to answer a request (the client is gone).
fn answered(result: Result<(), Error>) {
    if let Err(err) = result {
        eprintln!("{AGENT_NAME}: cannot answer: {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> impl Iterator<Item = String> + '_ {
        line.split_whitespace().map(str::to_owned)
    }

    #[test]
    fn command_lines_parse() {
        let options = Options::parse(args("--script s.json --sessions dir")).expect("parses");
        assert_eq!(options.script, PathBuf::from("s.json"));
        assert_eq!(options.sessions, Some(PathBuf::from("dir")));
        let options = Options::parse(args("--script=s.json")).expect("parses");
        assert_eq!(options.script, PathBuf::from("s.json"));
        assert_eq!(options.sessions, None);
        assert!(Options::parse(args("")).is_err());
        assert!(Options::parse(args("--script")).is_err());
        assert!(Options::parse(args("--script s.json --verbose")).is_err());
    }

    #[test]
    fn labels_come_from_meta() {
        let meta: schema::Meta =
            serde_json::from_str(r#"{"subagents": {"label": "research"}}"#).expect("a meta object");
        assert_eq!(label_of(Some(&meta)), Some("research".to_owned()));
        assert_eq!(label_of(None), None);
        let other: schema::Meta = serde_json::from_str(r#"{"other": 1}"#).expect("a meta object");
        assert_eq!(label_of(Some(&other)), None);
    }
}
