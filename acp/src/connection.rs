//! [`Connection`]: the client side of one agent process. It starts the
//! process, runs the protocol over its stdio on a task of its own,
//! initializes it within the command's limit, and hands what the agent
//! sends (updates, permission and file requests) to whoever runs the
//! current turn through one ordered, bounded channel ([`Inbound`]).
//!
//! Nothing the agent sends is dropped for want of room: updates are taken
//! out of its stdout by [`intake`](crate::intake), which waits for room in
//! the channel before it reads on, and the request handlers wait for room
//! too (the protocol library then holds the agent's further messages
//! until they have it). An update sent before a response is in the channel
//! before that response is delivered, so once `session/prompt` answers,
//! every update of the turn is already in the channel. Whoever awaits a
//! response of the agent keeps reading the channel meanwhile.

use std::path::Path;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::{self, schema as s};
use agent_client_protocol::{self as acp, Client, Lines};
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedWrite, LinesCodec, LinesCodecError};

use crate::command::AcpCommand;
use crate::error::AcpError;
use crate::intake::{intake, FaultSlot};
use crate::process::{describe_exit, AgentProcess};

/// How many of the agent's messages wait for the turn at most; past it the
/// agent's stdout is not read until the turn takes one (an agent flooding
/// its client cannot grow the host's memory, and loses nothing).
pub const INBOUND_CAPACITY: usize = 4096;

/// A line codec's failure as the transport's IO error.
fn line_error(err: LinesCodecError) -> std::io::Error {
    match err {
        LinesCodecError::MaxLineLengthExceeded => std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "a line over the codec's limit",
        ),
        LinesCodecError::Io(err) => err,
    }
}

/// What the agent sent the client, in arrival order.
pub(crate) enum Inbound {
    /// A `session/update` notification.
    Update(s::SessionNotification),
    /// A `session/request_permission` request, to be answered.
    Permission(
        s::RequestPermissionRequest,
        v1::Responder<s::RequestPermissionResponse>,
    ),
    /// A `fs/read_text_file` request, to be answered.
    ReadFile(
        s::ReadTextFileRequest,
        v1::Responder<s::ReadTextFileResponse>,
    ),
    /// A `fs/write_text_file` request, to be answered.
    WriteFile(
        s::WriteTextFileRequest,
        v1::Responder<s::WriteTextFileResponse>,
    ),
}

/// The client capabilities to offer: file reads and writes, each only
/// when the session may use the tool it is recorded as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Offer {
    pub(crate) read_text_file: bool,
    pub(crate) write_text_file: bool,
}

/// One initialized agent process.
pub(crate) struct Connection {
    cx: v1::ConnectionTo<acp::Agent>,
    /// What the agent sends, in order.
    pub(crate) inbound: mpsc::Receiver<Inbound>,
    /// The process.
    pub(crate) process: AgentProcess,
    /// What `initialize` answered.
    pub(crate) capabilities: s::AgentCapabilities,
    stop: Option<oneshot::Sender<()>>,
    /// The fault that ended the agent's stdout, if one did.
    fault: FaultSlot,
    program: String,
    session_limit: std::time::Duration,
}

/// A JSON-RPC error's code and message.
fn rpc_parts(err: &acp::Error) -> (i32, String) {
    (err.code.into(), err.message.clone())
}

/// Forwards `item`, waiting for room; once nobody reads (the agent is
/// being torn down) it is refused instead.
async fn forward(inbound: &mpsc::Sender<Inbound>, item: Inbound) {
    if let Err(mpsc::error::SendError(item)) = inbound.send(item).await {
        refuse(item);
    }
}

/// Answers a request no turn will serve: a permission is `cancelled`, a
/// file request an internal error; an update (one that arrived while no
/// turn ran, or during teardown) belongs to no turn and is dropped.
pub(crate) fn refuse(item: Inbound) {
    match item {
        Inbound::Update(_) => {}
        Inbound::Permission(_, responder) => {
            let _ = responder.respond(s::RequestPermissionResponse::new(
                s::RequestPermissionOutcome::Cancelled,
            ));
        }
        Inbound::ReadFile(_, responder) => {
            let _ = responder.respond_with_error(acp::Error::internal_error());
        }
        Inbound::WriteFile(_, responder) => {
            let _ = responder.respond_with_error(acp::Error::internal_error());
        }
    }
}

impl Connection {
    /// Starts `command`, connects over its stdio and initializes it,
    /// offering `offer`.
    ///
    /// # Errors
    /// [`AcpError::Spawn`], [`AcpError::InitializeTimeout`] (the process is
    /// killed), [`AcpError::Exited`] or [`AcpError::Protocol`].
    pub(crate) async fn open(command: &AcpCommand, offer: Offer) -> Result<Connection, AcpError> {
        let (process, pipes) = AgentProcess::spawn(command)?;
        let (to_turn, inbound) = mpsc::channel(INBOUND_CAPACITY);
        let fault = FaultSlot::default();
        let incoming = intake(pipes.stdout, to_turn.clone(), fault.clone());
        let outgoing = futures::SinkExt::<String>::sink_map_err(
            FramedWrite::new(pipes.stdin, LinesCodec::new()),
            line_error,
        );
        let transport = Lines::new(outgoing, incoming);
        let (updates, permissions, reads, writes) =
            (to_turn.clone(), to_turn.clone(), to_turn.clone(), to_turn);
        let (connected, connection) = oneshot::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let builder = Client
            .v1()
            .name("subagents")
            .on_receive_notification(
                async move |notification: s::SessionNotification, _cx| {
                    forward(&updates, Inbound::Update(notification)).await;
                    Ok(())
                },
                acp::on_receive_notification!(),
            )
            .on_receive_request(
                async move |request: s::RequestPermissionRequest, responder, _cx| {
                    forward(&permissions, Inbound::Permission(request, responder)).await;
                    Ok(())
                },
                acp::on_receive_request!(),
            )
            .on_receive_request(
                async move |request: s::ReadTextFileRequest, responder, _cx| {
                    forward(&reads, Inbound::ReadFile(request, responder)).await;
                    Ok(())
                },
                acp::on_receive_request!(),
            )
            .on_receive_request(
                async move |request: s::WriteTextFileRequest, responder, _cx| {
                    forward(&writes, Inbound::WriteFile(request, responder)).await;
                    Ok(())
                },
                acp::on_receive_request!(),
            );
        tokio::spawn(async move {
            let _ = builder
                .connect_with(transport, async move |cx: v1::ConnectionTo<acp::Agent>| {
                    let _ = connected.send(cx.clone());
                    tokio::select! {
                        _ = stopped => {}
                        () = cx.incoming_closed() => {}
                    }
                    Ok(())
                })
                .await;
        });
        let mut connection = Connection {
            cx: match connection.await {
                Ok(cx) => cx,
                Err(_) => {
                    let mut process = process;
                    if let Some(fault) = fault.get() {
                        process.kill().await;
                        return Err(AcpError::Malformed {
                            request: "initialize",
                            fault,
                            stderr: process.stderr_tail(),
                        });
                    }
                    let status =
                        tokio::time::timeout(std::time::Duration::from_millis(500), process.wait())
                            .await
                            .ok()
                            .flatten();
                    return Err(AcpError::Exited {
                        request: "initialize",
                        status: describe_exit(status),
                        stderr: process.stderr_tail(),
                    });
                }
            },
            inbound,
            process,
            capabilities: s::AgentCapabilities::new(),
            stop: Some(stop),
            fault,
            program: command.program.clone(),
            session_limit: command.timeouts.session,
        };
        let capabilities = s::ClientCapabilities::new().fs(s::FileSystemCapabilities::new()
            .read_text_file(offer.read_text_file)
            .write_text_file(offer.write_text_file));
        let request = s::InitializeRequest::new(ProtocolVersion::V1)
            .client_capabilities(capabilities)
            .client_info(s::Implementation::new(
                "subagents",
                env!("CARGO_PKG_VERSION"),
            ));
        let answer = tokio::time::timeout(
            command.timeouts.initialize,
            connection.cx.send_request(request).block_task(),
        )
        .await;
        match answer {
            Err(_) => {
                connection.process.kill().await;
                Err(AcpError::InitializeTimeout {
                    program: connection.program.clone(),
                    after: command.timeouts.initialize,
                    stderr: connection.process.stderr_tail(),
                })
            }
            Ok(Err(err)) => Err(connection.failure("initialize", &err).await),
            Ok(Ok(initialized)) => {
                connection.capabilities = initialized.agent_capabilities;
                Ok(connection)
            }
        }
    }

    /// What `err`, answered to `request`, means: the process gone
    /// ([`AcpError::Exited`], after waiting briefly for its status) or a
    /// protocol error.
    pub(crate) async fn failure(&mut self, request: &'static str, err: &acp::Error) -> AcpError {
        if acp::is_incoming_transport_closed(err) || acp::is_connection_terminated(err) {
            return self.exited(request).await;
        }
        let (code, message) = rpc_parts(err);
        AcpError::Protocol {
            request,
            code,
            message,
            stderr: self.process.stderr_tail(),
        }
    }

    /// The connection gone during `request`: the fault that ended the
    /// agent's stdout ([`AcpError::Malformed`]; the process is killed),
    /// else the process's status (waited for briefly) and stderr tail.
    pub(crate) async fn exited(&mut self, request: &'static str) -> AcpError {
        if let Some(fault) = self.fault.get() {
            self.process.kill().await;
            return AcpError::Malformed {
                request,
                fault,
                stderr: self.process.stderr_tail(),
            };
        }
        let status =
            tokio::time::timeout(std::time::Duration::from_millis(500), self.process.wait())
                .await
                .ok()
                .flatten();
        AcpError::Exited {
            request,
            status: describe_exit(status),
            stderr: self.process.stderr_tail(),
        }
    }

    /// `request` past the session limit: the process is killed.
    async fn session_timeout(&mut self, request: &'static str) -> AcpError {
        self.process.kill().await;
        AcpError::SessionTimeout {
            request,
            after: self.session_limit,
            stderr: self.process.stderr_tail(),
        }
    }

    /// Whether the agent supports `session/load`.
    pub(crate) fn loads_sessions(&self) -> bool {
        self.capabilities.load_session
    }

    /// Whether the agent takes a system prompt at session creation.
    pub(crate) fn takes_system_prompt(&self) -> bool {
        self.capabilities
            .session_capabilities
            .system_prompt
            .is_some()
    }

    /// Whether the agent takes image prompts.
    pub(crate) fn takes_images(&self) -> bool {
        self.capabilities.prompt_capabilities.image
    }

    /// `session/new` in `cwd`, with `meta` as its `_meta` and the persona
    /// as its system prompt when given (only when the agent takes one);
    /// what the agent sends before its answer is drained and dropped.
    ///
    /// # Errors
    /// As [`failure`](Self::failure).
    pub(crate) async fn new_session(
        &mut self,
        cwd: &Path,
        meta: Map<String, Value>,
        system_prompt: Option<&str>,
    ) -> Result<s::SessionId, AcpError> {
        let mut request = s::NewSessionRequest::new(cwd.to_owned()).meta(meta);
        if let Some(text) = system_prompt {
            request = request.system_prompt(s::SystemPrompt::new(vec![s::ContentBlock::Text(
                s::TextContent::new(text.to_owned()),
            )]));
        }
        let answer = self.cx.send_request(request).block_task();
        match self.answered_draining("session/new", answer).await? {
            Ok(created) => Ok(created.session_id),
            Err(err) => Err(self.failure("session/new", &err).await),
        }
    }

    /// `session/load` of `session` in `cwd`; the history it replays is
    /// drained from the channel as it comes and dropped (the log already
    /// holds it): a history longer than the channel would otherwise hold
    /// the agent's stdout, and with it the answer, for good.
    ///
    /// # Errors
    /// As [`failure`](Self::failure).
    pub(crate) async fn load_session(
        &mut self,
        session: s::SessionId,
        cwd: &Path,
        meta: Map<String, Value>,
    ) -> Result<(), AcpError> {
        let request = s::LoadSessionRequest::new(session, cwd.to_owned()).meta(meta);
        let answer = self.cx.send_request(request).block_task();
        match self.answered_draining("session/load", answer).await? {
            Ok(_) => Ok(()),
            Err(err) => Err(self.failure("session/load", &err).await),
        }
    }

    /// `answer` to `request`, within the session limit (past it the
    /// process is killed: [`AcpError::SessionTimeout`]). What the agent
    /// sends meanwhile belongs to no turn and is drained as it comes:
    /// left in the channel, more of it than the channel holds would stop
    /// the agent's stdout being read, and with it the answer.
    async fn answered_draining<T>(
        &mut self,
        request: &'static str,
        answer: impl std::future::Future<Output = T>,
    ) -> Result<T, AcpError> {
        tokio::pin!(answer);
        let deadline = tokio::time::sleep(self.session_limit);
        tokio::pin!(deadline);
        let answered = loop {
            tokio::select! {
                biased;
                answered = &mut answer => break answered,
                Some(item) = self.inbound.recv() => refuse(item),
                () = &mut deadline => return Err(self.session_timeout(request).await),
            }
        };
        while let Ok(item) = self.inbound.try_recv() {
            refuse(item);
        }
        Ok(answered)
    }

    /// A `session/prompt` request, sent; awaiting it awaits the answer.
    /// Dropping it before the answer cancels the request (`$/cancel_request`).
    pub(crate) fn prompt(
        &self,
        session: s::SessionId,
        prompt: Vec<s::ContentBlock>,
    ) -> impl std::future::Future<Output = Result<s::PromptResponse, acp::Error>> + Send + 'static
    {
        self.cx
            .send_request(s::PromptRequest::new(session, prompt))
            .block_task()
    }

    /// Sends `session/cancel` for `session`; false when the connection is
    /// gone.
    pub(crate) fn cancel(&self, session: s::SessionId) -> bool {
        self.cx
            .send_notification(s::CancelNotification::new(session))
            .is_ok()
    }
}

impl Drop for Connection {
    /// Ends the protocol task; the process is killed when `process` drops.
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
