//! The drivers: side-effecting reactors that do the IO of one activation or
//! run and report every outcome back through the engine as a command.

mod external;
mod local;

pub(crate) use external::ExternalDriver;
pub(crate) use local::LocalDriver;

use subagent_core::{SessionId, SubagentError, SubagentResult, SubagentRunEndInfo, SubagentRunId};

use crate::activation::DriverHandle;
use crate::runtime::{Notice, SubagentRuntime};

/// What follows every recorded settlement, local or external: the parent is
/// woken (a parent-delivered notice or report is a message to it),
/// `subagent/end` is announced when `end` is given (only for a child whose
/// `subagent/start` was announced), and the handle's `result()` resolves.
pub(crate) fn announce_settled(
    runtime: &SubagentRuntime,
    handle: &DriverHandle,
    end: Option<SubagentRunEndInfo>,
    result: Result<SubagentResult, SubagentError>,
) {
    runtime.wake(handle.parent);
    if let Some(info) = end {
        runtime.notify(Notice::End {
            parent: handle.parent,
            info,
        });
    }
    handle.settle(result);
}

/// The `subagent/end` of a settled child: its run, provider, id and
/// locality, the result's stop reason, and its output as the last assistant
/// message (none when empty).
pub(crate) fn end_info(
    run_id: SubagentRunId,
    provider: &str,
    child: SessionId,
    local: bool,
    result: &SubagentResult,
) -> SubagentRunEndInfo {
    SubagentRunEndInfo {
        run_id,
        provider: provider.to_owned(),
        id: child,
        local,
        stop_reason: result.stop_reason.clone(),
        last_assistant_message: (!result.output.is_empty()).then(|| result.output.clone()),
    }
}
