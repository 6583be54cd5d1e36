//! [`drive`]: one `session/prompt` on a live connection, to its answer,
//! with everything the agent sends meanwhile handed to a [`TurnSink`]
//! (which records it, or only collects it) and the turn's cancellation
//! carried out as ACP asks: `session/cancel`, then the agent's
//! `cancelled`, or a killed process group after the grace period.
//!
//! The continuable agent ([`crate::agent`]) and the one-shot run
//! ([`crate::provider`]) both run their turns through it.

use std::future::Future;
use std::time::Duration;

use agent_client_protocol::v1::schema as s;
use agent_client_protocol::{self as acp};
use serde_json::{json, Value};
use subagent_core::{Diagnostic, SubagentStopReason, MAX_CONTENT_BYTES};
use subagent_runtime::TurnEnd;
use tokio_util::sync::CancellationToken;

use crate::connection::{refuse, Connection, Inbound};
use crate::error::AcpError;
use crate::mapping::{self, Transcriber, TurnStep, READ_TEXT_FILE, WRITE_TEXT_FILE};

/// Where a turn's traffic goes.
pub(crate) trait TurnSink: Send {
    /// Records or collects one step (an assistant message, a report, a
    /// call announced, a call's result).
    fn step(&mut self, step: TurnStep) -> impl Future<Output = ()> + Send;
    /// Whether the call a permission request names may run.
    fn permitted(
        &mut self,
        request: &s::RequestPermissionRequest,
    ) -> impl Future<Output = bool> + Send;
    /// One client file request (`fs/read_text_file` or
    /// `fs/write_text_file` with its input): the text to answer, or the
    /// error.
    fn file(
        &mut self,
        name: &'static str,
        input: Value,
    ) -> impl Future<Output = Result<String, acp::Error>> + Send;
}

/// A live agent session.
pub(crate) struct Live {
    pub(crate) connection: Connection,
    pub(crate) session: s::SessionId,
}

/// How a turn went.
pub(crate) struct Driven {
    /// Its end.
    pub(crate) end: TurnEnd,
    /// The text of its last non-empty assistant message.
    pub(crate) last_text: String,
    /// Whether the connection survives (false once the process is gone
    /// or killed).
    pub(crate) alive: bool,
}

/// A turn that ended `error` on `error`: its diagnostic is the error's
/// code and text.
pub(crate) fn failed(error: &AcpError) -> TurnEnd {
    failed_with(&error.diagnostic())
}

/// A turn that ended `error` with `diagnostic`.
pub(crate) fn failed_with(diagnostic: &str) -> TurnEnd {
    TurnEnd {
        stop_reason: SubagentStopReason::Error,
        diagnostic: Some(Diagnostic::new(diagnostic)),
        structured: None,
    }
}

/// A turn that ended `aborted` before the agent ran it.
pub(crate) fn aborted(diagnostic: &str) -> TurnEnd {
    TurnEnd {
        stop_reason: SubagentStopReason::Aborted,
        diagnostic: Some(Diagnostic::new(diagnostic)),
        structured: None,
    }
}

/// Sleeps until `deadline` (forever without one).
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The option answering a permission request: the first allow option when
/// permitted, else the first reject option; `cancelled` once the turn is
/// cancelled, or when the agent offered no such option.
pub(crate) fn choose(
    options: &[s::PermissionOption],
    permitted: bool,
    cancelled: bool,
) -> s::RequestPermissionOutcome {
    if cancelled {
        return s::RequestPermissionOutcome::Cancelled;
    }
    let kinds: &[s::PermissionOptionKind] = if permitted {
        &[
            s::PermissionOptionKind::AllowOnce,
            s::PermissionOptionKind::AllowAlways,
        ]
    } else {
        &[
            s::PermissionOptionKind::RejectOnce,
            s::PermissionOptionKind::RejectAlways,
        ]
    };
    kinds
        .iter()
        .find_map(|kind| options.iter().find(|option| option.kind == *kind))
        .map_or(s::RequestPermissionOutcome::Cancelled, |option| {
            s::RequestPermissionOutcome::Selected(s::SelectedPermissionOutcome::new(
                option.option_id.clone(),
            ))
        })
}

/// Collects steps, noting the last assistant text.
struct Steps<'a, S> {
    sink: &'a mut S,
    transcriber: Transcriber,
    last_text: String,
}

impl<S: TurnSink> Steps<'_, S> {
    async fn apply(&mut self, step: TurnStep) {
        if let TurnStep::Record(subagent_runtime::TranscriptItem::Assistant(content)) = &step {
            let text = subagent_core::content::plain_text(content);
            if !text.trim().is_empty() {
                self.last_text = text;
            }
        }
        self.sink.step(step).await;
    }

    /// Applies one update; `Err` once the message it accumulates is past
    /// [`MAX_CONTENT_BYTES`] (it could never be recorded, and holding more
    /// of it would grow without bound).
    async fn update(&mut self, update: &s::SessionUpdate) -> Result<(), TooLarge> {
        for step in self.transcriber.update(update) {
            self.apply(step).await;
        }
        if self.transcriber.pending_bytes() > MAX_CONTENT_BYTES {
            return Err(TooLarge);
        }
        Ok(())
    }

    async fn flush(&mut self) {
        if let Some(step) = self.transcriber.flush() {
            self.apply(step).await;
        }
    }

    /// Serves one request of the agent.
    async fn serve(&mut self, item: Inbound, cancelled: bool) {
        match item {
            Inbound::Update(_) => {}
            Inbound::Permission(request, responder) => {
                let permitted = !cancelled && self.sink.permitted(&request).await;
                let _ = responder.respond(s::RequestPermissionResponse::new(choose(
                    &request.options,
                    permitted,
                    cancelled,
                )));
            }
            Inbound::ReadFile(request, responder) => {
                let input =
                    json!({"path": request.path, "line": request.line, "limit": request.limit});
                match self.sink.file(READ_TEXT_FILE, input).await {
                    Ok(text) => {
                        let _ = responder.respond(s::ReadTextFileResponse::new(text));
                    }
                    Err(error) => {
                        let _ = responder.respond_with_error(error);
                    }
                }
            }
            Inbound::WriteFile(request, responder) => {
                let input = json!({"path": request.path, "content": request.content});
                match self.sink.file(WRITE_TEXT_FILE, input).await {
                    Ok(_) => {
                        let _ = responder.respond(s::WriteTextFileResponse::new());
                    }
                    Err(error) => {
                        let _ = responder.respond_with_error(error);
                    }
                }
            }
        }
    }
}

/// An assistant message past [`MAX_CONTENT_BYTES`].
struct TooLarge;

/// Why a turn's `session/cancel` was sent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cancelled {
    /// The turn was cancelled (interrupt, dispose).
    Asked,
    /// The agent sent nothing for the idle limit.
    Idle,
}

/// A turn's time limits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// How long a cancelled turn may take to answer.
    pub(crate) grace: Duration,
    /// How long the agent may send nothing before the turn is cancelled.
    pub(crate) idle: Duration,
}

impl From<&crate::command::AcpTimeouts> for Limits {
    fn from(timeouts: &crate::command::AcpTimeouts) -> Limits {
        Limits {
            grace: timeouts.cancel_grace,
            idle: timeouts.idle,
        }
    }
}

/// Runs one prompt on `live` to its end. `cancel` firing sends
/// `session/cancel`; an answer within the grace period ends the turn as
/// the agent says (`cancelled`: aborted), none kills the process group and
/// ends it `error` (`acp/cancel-unanswered`). An agent that sends nothing
/// for the idle limit is cancelled the same way, and the turn ends `error`
/// (`acp/idle-timeout`) whether or not it answers. An assistant message
/// past [`MAX_CONTENT_BYTES`] kills the process and ends the turn `error`
/// (`acp/output-too-large`). With `output_schema`, a completed turn's
/// capture is its last message as JSON.
pub(crate) async fn drive(
    live: &mut Live,
    prompt: Vec<s::ContentBlock>,
    cancel: &CancellationToken,
    limits: Limits,
    output_schema: Option<&Value>,
    sink: &mut impl TurnSink,
) -> Driven {
    // What arrived since the last turn answered belongs to no turn: late
    // updates are dropped, late requests refused.
    while let Ok(item) = live.connection.inbound.try_recv() {
        refuse(item);
    }
    let answer = live.connection.prompt(live.session.clone(), prompt);
    tokio::pin!(answer);
    let mut steps = Steps {
        sink,
        transcriber: Transcriber::new(),
        last_text: String::new(),
    };
    // Set once `session/cancel` is sent: why, and when the grace ends.
    let mut cancelled: Option<(Cancelled, tokio::time::Instant)> = None;
    let mut idle_until = tokio::time::Instant::now() + limits.idle;
    let outcome = loop {
        tokio::select! {
            // In this order: the prompt is polled (so sent) before a
            // cancellation already pending is, or `session/cancel` could
            // reach the agent ahead of the prompt it cancels, find no turn,
            // and the prompt would run to the grace period's kill.
            biased;
            answered = &mut answer => break Some(answered),
            item = live.connection.inbound.recv() => {
                match item {
                    None => break None,
                    Some(Inbound::Update(update)) if update.session_id == live.session => {
                        if steps.update(&update.update).await.is_err() {
                            return too_large(live, steps.last_text).await;
                        }
                    }
                    Some(Inbound::Update(_)) => {}
                    Some(item) => steps.serve(item, cancelled.is_some()).await,
                }
                // The agent spoke; the time its request took us is not its.
                idle_until = tokio::time::Instant::now() + limits.idle;
            }
            () = cancel.cancelled(), if cancelled.is_none() => {
                live.connection.cancel(live.session.clone());
                cancelled = Some((Cancelled::Asked, tokio::time::Instant::now() + limits.grace));
            }
            () = tokio::time::sleep_until(idle_until), if cancelled.is_none() => {
                live.connection.cancel(live.session.clone());
                cancelled = Some((Cancelled::Idle, tokio::time::Instant::now() + limits.grace));
            }
            () = sleep_until(cancelled.map(|(_, until)| until)), if cancelled.is_some() => {
                steps.flush().await;
                live.connection.process.kill().await;
                let stderr = live.connection.process.stderr_tail();
                let error = match cancelled {
                    Some((Cancelled::Idle, _)) => AcpError::IdleTimeout { after: limits.idle, killed: true, stderr },
                    _ => AcpError::CancelUnanswered { after: limits.grace, stderr },
                };
                return Driven { end: failed(&error), last_text: steps.last_text, alive: false };
            }
        }
    };
    // Every update sent before the answer is queued by now.
    while let Ok(item) = live.connection.inbound.try_recv() {
        match item {
            Inbound::Update(update) if update.session_id == live.session => {
                if steps.update(&update.update).await.is_err() {
                    return too_large(live, steps.last_text).await;
                }
            }
            Inbound::Update(_) => {}
            other => refuse(other),
        }
    }
    steps.flush().await;
    let last_text = steps.last_text;
    if let (Some(Ok(_)), Some((Cancelled::Idle, _))) = (&outcome, cancelled) {
        let error = AcpError::IdleTimeout {
            after: limits.idle,
            killed: false,
            stderr: live.connection.process.stderr_tail(),
        };
        return Driven {
            end: failed(&error),
            last_text,
            alive: true,
        };
    }
    match outcome {
        Some(Ok(answered)) => {
            let (stop_reason, diagnostic) = mapping::stop_reason(&answered.stop_reason);
            let structured = output_schema
                .filter(|_| stop_reason == SubagentStopReason::Completed)
                .and_then(|_| mapping::structured_capture(&last_text));
            Driven {
                end: TurnEnd {
                    stop_reason,
                    diagnostic: diagnostic.map(Diagnostic::new),
                    structured,
                },
                last_text,
                alive: true,
            }
        }
        Some(Err(err)) => {
            let error = live.connection.failure("session/prompt", &err).await;
            // A refused prompt leaves the session usable; a lost process not.
            let alive = matches!(error, AcpError::Protocol { .. });
            Driven {
                end: failed(&error),
                last_text,
                alive,
            }
        }
        None => {
            let error = live.connection.exited("session/prompt").await;
            Driven {
                end: failed(&error),
                last_text,
                alive: false,
            }
        }
    }
}

/// Ends a turn whose assistant message outgrew [`MAX_CONTENT_BYTES`]: the
/// message is not recorded (it could not be), the process is killed (it
/// would go on sending), and the turn ends `error`
/// (`acp/output-too-large`).
async fn too_large(live: &mut Live, last_text: String) -> Driven {
    live.connection.process.kill().await;
    tracing::warn!(
        limit = MAX_CONTENT_BYTES,
        "an ACP agent's message outgrew the content limit; its process was killed"
    );
    let error = AcpError::OutputTooLarge {
        limit: MAX_CONTENT_BYTES,
        stderr: live.connection.process.stderr_tail(),
    };
    Driven {
        end: failed(&error),
        last_text,
        alive: false,
    }
}
