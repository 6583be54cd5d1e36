//! The `acp` providers.
//!
//! - [`AcpProvider::continuable`]: continuable children, like `spawn` (no
//!   parent history). Its only part in a child is its creation inputs, as
//!   the spec has it; the child's agent is built by an [`AcpHost`] that
//!   routes this provider's name to a command.
//! - [`AcpProvider::one_shot`]: external one-shot runs on the same kind of
//!   command. A run is one ACP session and one prompt; its result is the
//!   last assistant message and the mapped stop reason. It has no
//!   transcript of its own (the spec's external runs record only their
//!   result), so its tool filter is enforced on permission requests but
//!   the calls are not recorded, and it takes no persona, output schema or
//!   agent options.
//!
//! [`AcpHost`]: crate::AcpHost

use agent_client_protocol::v1::schema as s;
use agent_client_protocol::{self as acp};
use serde_json::{Map, Value};
use subagent_core::{
    ContentBlock, ContinuableCreateSpec, Diagnostic, SubagentCapabilities, SubagentError,
    SubagentResult, ToolRestriction,
};
use subagent_runtime::provider::{
    ContinuableCreateRequest, ResolvedStartRequest, SubagentProvider, SubagentRun,
};
use subagent_runtime::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::command::AcpCommand;
use crate::connection::{Connection, Offer};
use crate::mapping::{self, TurnStep};
use crate::turn::{drive, Limits, Live, TurnSink};

/// An `acp` provider.
#[derive(Clone, Debug)]
pub struct AcpProvider {
    name: String,
    /// `None` for continuable children (the host holds the command).
    one_shot: Option<AcpCommand>,
}

impl AcpProvider {
    /// Continuable children registered as `name`; route `name` to a
    /// command with [`AcpHost::route`](crate::AcpHost::route).
    #[must_use]
    pub fn continuable(name: &str) -> AcpProvider {
        AcpProvider {
            name: name.to_owned(),
            one_shot: None,
        }
    }

    /// One-shot external runs of `command`, registered as `name`.
    #[must_use]
    pub fn one_shot(name: &str, command: AcpCommand) -> AcpProvider {
        AcpProvider {
            name: name.to_owned(),
            one_shot: Some(command),
        }
    }
}

impl SubagentProvider for AcpProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> SubagentCapabilities {
        if self.one_shot.is_some() {
            SubagentCapabilities {
                tool_filter: true,
                ..SubagentCapabilities::default()
            }
        } else {
            SubagentCapabilities::ALL
        }
    }

    fn inherits_parent_context(&self) -> bool {
        false
    }

    fn is_continuable(&self) -> bool {
        self.one_shot.is_none()
    }

    fn prepare_continuable(
        &self,
        _request: ContinuableCreateRequest,
    ) -> BoxFuture<'static, Result<ContinuableCreateSpec, SubagentError>> {
        Box::pin(async { Ok(ContinuableCreateSpec { seed: None }) })
    }

    fn start(
        &self,
        request: ResolvedStartRequest,
    ) -> BoxFuture<'static, Result<Box<dyn SubagentRun>, SubagentError>> {
        let Some(command) = self.one_shot.clone() else {
            return Box::pin(async {
                Err(SubagentError::NotResumable(
                    "the continuable acp provider runs no one-shot starts".into(),
                ))
            });
        };
        Box::pin(async move {
            if request.signal.is_cancelled() {
                return Err(SubagentError::Cancelled);
            }
            // Setup is the provider's until the run is returned: a failure
            // here drops the connection, which kills the process group.
            let mut connection = tokio::select! {
                connected = Connection::open(&command, Offer::default()) => connected?,
                () = request.signal.cancelled() => return Err(SubagentError::Cancelled),
            };
            let mut meta = Map::new();
            meta.insert(
                "subagents".into(),
                serde_json::json!({"label": request.label, "runId": request.run_id}),
            );
            let session = tokio::select! {
                session = connection.new_session(&command.cwd, meta, None) => session?,
                () = request.signal.cancelled() => return Err(SubagentError::Cancelled),
            };
            let prompt = request.request.prompt.iter().map(mapping::to_acp).collect();
            Ok(Box::new(AcpRun {
                live: Some(Live {
                    connection,
                    session,
                }),
                prompt: Some(prompt),
                filter: request.descriptor.tool_filter.clone(),
                signal: request.signal,
                limits: Limits::from(&command.timeouts),
            }) as Box<dyn SubagentRun>)
        })
    }
}

/// One external run: its session, until disposed.
struct AcpRun {
    live: Option<Live>,
    prompt: Option<Vec<s::ContentBlock>>,
    filter: Option<ToolRestriction>,
    signal: CancellationToken,
    limits: Limits,
}

/// A run's traffic: assistant text collected, permissions decided by the
/// run's tool filter, file requests refused (none were offered).
struct RunSink<'a> {
    filter: Option<&'a ToolRestriction>,
    output: Vec<ContentBlock>,
}

impl TurnSink for RunSink<'_> {
    async fn step(&mut self, step: TurnStep) {
        if let TurnStep::Record(subagent_runtime::TranscriptItem::Assistant(content)) = step {
            if !subagent_core::content::plain_text(&content)
                .trim()
                .is_empty()
            {
                self.output = content;
            }
        }
    }

    async fn permitted(&mut self, request: &s::RequestPermissionRequest) -> bool {
        let name = mapping::agent_tool_name(request.tool_call.fields.kind.as_ref());
        ToolRestriction::permits_in(self.filter, &name)
    }

    async fn file(&mut self, _name: &'static str, _input: Value) -> Result<String, acp::Error> {
        Err(acp::Error::method_not_found())
    }
}

impl SubagentRun for AcpRun {
    fn result(&mut self) -> BoxFuture<'_, Result<SubagentResult, SubagentError>> {
        Box::pin(async move {
            let (Some(live), Some(prompt)) = (self.live.as_mut(), self.prompt.take()) else {
                return Ok(SubagentResult::failed(
                    subagent_core::SubagentStopReason::Aborted,
                    Vec::new(),
                    "disposed",
                ));
            };
            let mut sink = RunSink {
                filter: self.filter.as_ref(),
                output: Vec::new(),
            };
            let driven = drive(live, prompt, &self.signal, self.limits, None, &mut sink).await;
            if !driven.alive {
                self.live = None;
            }
            Ok(SubagentResult {
                output: sink.output,
                structured: None,
                diagnostic: driven.end.diagnostic,
                stop_reason: driven.end.stop_reason,
            })
        })
    }

    fn dispose(&mut self) -> BoxFuture<'_, Result<(), Diagnostic>> {
        Box::pin(async move {
            if let Some(mut live) = self.live.take() {
                live.connection.process.kill().await;
            }
            Ok(())
        })
    }
}
