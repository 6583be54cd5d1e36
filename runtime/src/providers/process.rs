//! `process`: an external provider that runs a configured command as one
//! execution, so any command-line agent can be delegated to. The prompt's
//! text goes to stdin; the final text is stdout. Exit status 0 is
//! `completed`; any other status is `error` with a diagnostic naming only the
//! status (never the output, which may hold file contents); cancellation
//! kills the process and is `aborted`. The command runs in a process group
//! of its own, and cancellation and dispose kill the whole group, so
//! nothing the command started outlives the run.

use std::process::Stdio;

use subagent_core::{
    content::plain_text, ContentBlock, Diagnostic, SubagentCapabilities, SubagentError,
    SubagentResult, SubagentStopReason,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::provider::{ResolvedStartRequest, SubagentProvider, SubagentRun};
use crate::BoxFuture;

/// Runs `program args...` per delegation.
#[derive(Clone, Debug)]
pub struct ProcessProvider {
    name: String,
    program: String,
    args: Vec<String>,
}

impl ProcessProvider {
    /// A provider registered as `name` that runs `program` with `args`.
    #[must_use]
    pub fn new(name: &str, program: &str, args: &[&str]) -> Self {
        ProcessProvider {
            name: name.to_owned(),
            program: program.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        }
    }
}

struct ProcessRun {
    child: Option<Child>,
    /// The command's process group (its pid), kept after it is reaped: what
    /// it started may outlive it.
    group: Option<i32>,
    cancel: CancellationToken,
    stdout: Option<tokio::process::ChildStdout>,
}

impl SubagentProvider for ProcessProvider {
    fn name(&self) -> &str {
        &self.name
    }
    fn capabilities(&self) -> SubagentCapabilities {
        SubagentCapabilities::default()
    }
    fn inherits_parent_context(&self) -> bool {
        false
    }
    fn start(
        &self,
        request: ResolvedStartRequest,
    ) -> BoxFuture<'static, Result<Box<dyn SubagentRun>, SubagentError>> {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        crate::child_process::die_with_parent(&mut command);
        let program = self.program.clone();
        Box::pin(async move {
            if request.signal.is_cancelled() {
                return Err(SubagentError::Cancelled);
            }
            let mut child = command.spawn().map_err(|err| {
                SubagentError::internal(format!("starting {program}: {}", err.kind()))
            })?;
            let prompt = plain_text(&request.request.prompt);
            if let Some(mut stdin) = child.stdin.take() {
                // A command that does not read its stdin is not a failure.
                let _ = stdin.write_all(prompt.as_bytes()).await;
            }
            let stdout = child.stdout.take();
            let group = child.id().and_then(|pid| i32::try_from(pid).ok());
            Ok(Box::new(ProcessRun {
                group,
                child: Some(child),
                cancel: request.signal,
                stdout,
            }) as Box<dyn SubagentRun>)
        })
    }
}

/// Sends SIGKILL to the process group `group` (the command's pid, from
/// `process_group(0)`).
fn kill_group(group: Option<i32>) {
    if let Some(group) = group {
        // SAFETY: kill(2) with a negative pid signals that process group
        // and touches no memory of ours. A group id is not reused while any
        // member lives; once none does, the call finds no group.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
}

impl SubagentRun for ProcessRun {
    fn result(&mut self) -> BoxFuture<'_, Result<SubagentResult, SubagentError>> {
        Box::pin(async move {
            let mut output = Vec::new();
            let Some(child) = self.child.as_mut() else {
                return Ok(SubagentResult::failed(
                    SubagentStopReason::Aborted,
                    Vec::new(),
                    "disposed",
                ));
            };
            let read = async {
                if let Some(stdout) = self.stdout.as_mut() {
                    let _ = stdout.read_to_end(&mut output).await;
                }
                child.wait().await
            };
            let status = tokio::select! {
                status = read => status.map_err(|err| SubagentError::internal(format!("waiting for the process: {}", err.kind())))?,
                () = self.cancel.cancelled() => {
                    kill_group(self.group);
                    let _ = child.kill().await;
                    return Ok(SubagentResult::failed(SubagentStopReason::Aborted, Vec::new(), "cancelled"));
                }
            };
            let text = String::from_utf8_lossy(&output).trim_end().to_owned();
            let content = if text.is_empty() {
                Vec::new()
            } else {
                vec![ContentBlock::text(text)]
            };
            Ok(if status.success() {
                SubagentResult::completed(content)
            } else {
                let code = status
                    .code()
                    .map_or_else(|| "a signal".to_owned(), |code| format!("status {code}"));
                SubagentResult::failed(
                    SubagentStopReason::Error,
                    content,
                    format!("the process exited with {code}"),
                )
            })
        })
    }

    fn dispose(&mut self) -> BoxFuture<'_, Result<(), Diagnostic>> {
        Box::pin(async move {
            if let Some(mut child) = self.child.take() {
                // What the command started may outlive the command itself.
                kill_group(self.group.take());
                if child.try_wait().ok().flatten().is_none() {
                    child.kill().await.map_err(|err| {
                        Diagnostic::new(format!("killing the process: {}", err.kind()))
                    })?;
                }
            }
            Ok(())
        })
    }
}
