//! `instant`: an external one-shot provider whose runs complete at once with
//! the text `done`. It supports no start option. It measures the runtime's
//! own cost per activation (benchmarks) and gives tests an external child
//! with no process behind it.

use subagent_core::{
    ContentBlock, Diagnostic, SubagentCapabilities, SubagentError, SubagentResult,
};

use crate::provider::{ResolvedStartRequest, SubagentProvider, SubagentRun};
use crate::BoxFuture;

/// The `instant` provider.
#[derive(Clone, Copy, Debug, Default)]
pub struct InstantProvider;

struct InstantRun;

impl SubagentRun for InstantRun {
    fn result(&mut self) -> BoxFuture<'_, Result<SubagentResult, SubagentError>> {
        Box::pin(async { Ok(SubagentResult::completed(vec![ContentBlock::text("done")])) })
    }
    fn dispose(&mut self) -> BoxFuture<'_, Result<(), Diagnostic>> {
        Box::pin(async { Ok(()) })
    }
}

impl SubagentProvider for InstantProvider {
    fn name(&self) -> &str {
        "instant"
    }
    fn capabilities(&self) -> SubagentCapabilities {
        SubagentCapabilities::default()
    }
    fn inherits_parent_context(&self) -> bool {
        false
    }
    fn start(
        &self,
        _request: ResolvedStartRequest,
    ) -> BoxFuture<'static, Result<Box<dyn SubagentRun>, SubagentError>> {
        Box::pin(async { Ok(Box::new(InstantRun) as Box<dyn SubagentRun>) })
    }
}
