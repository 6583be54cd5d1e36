//! [`AgentProcess`]: one agent child process in a process group of its
//! own, its stdin and stdout for the protocol, and a bounded tail of its
//! stderr for diagnostics. Dropping it kills the whole group, so no process
//! the agent started outlives it; on Linux the agent also dies with the
//! host (its parent-death signal).

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::command::AcpCommand;
use crate::error::AcpError;

/// How much of the agent's stderr is kept (its newest bytes).
pub const STDERR_TAIL_BYTES: usize = 4096;

/// A running agent process.
pub(crate) struct AgentProcess {
    child: Child,
    /// The process group: the child's pid.
    group: Option<i32>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Values removed from the stderr tail (the command's environment).
    secrets: Vec<String>,
}

/// The protocol's pipes.
pub(crate) struct Pipes {
    pub(crate) stdin: ChildStdin,
    pub(crate) stdout: ChildStdout,
}

impl AgentProcess {
    /// Starts `command` in a new process group.
    ///
    /// # Errors
    /// [`AcpError::Spawn`] when the program cannot be started.
    pub(crate) fn spawn(command: &AcpCommand) -> Result<(AgentProcess, Pipes), AcpError> {
        let mut builder = Command::new(&command.program);
        builder
            .args(&command.args)
            .envs(command.env.iter().map(|(name, value)| (name, value)))
            .current_dir(&command.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        subagent_runtime::child_process::die_with_parent(&mut builder);
        let mut child = builder.spawn().map_err(|err| AcpError::Spawn {
            program: command.program.clone(),
            kind: err.kind(),
        })?;
        let group = child.id().and_then(|pid| i32::try_from(pid).ok());
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(AcpError::Spawn {
                program: command.program.clone(),
                kind: std::io::ErrorKind::BrokenPipe,
            });
        };
        let stderr = Arc::new(Mutex::new(Vec::new()));
        if let Some(mut pipe) = child.stderr.take() {
            let tail = Arc::clone(&stderr);
            tokio::spawn(async move {
                let mut chunk = [0u8; 1024];
                while let Ok(read) = pipe.read(&mut chunk).await {
                    if read == 0 {
                        break;
                    }
                    if let Ok(mut tail) = tail.lock() {
                        tail.extend_from_slice(&chunk[..read]);
                        // Twice the tail is kept, so a secret cut at the
                        // tail's edge is still whole when it is redacted.
                        let excess = tail.len().saturating_sub(2 * STDERR_TAIL_BYTES);
                        tail.drain(..excess);
                    }
                }
            });
        }
        let secrets = command
            .env
            .iter()
            .map(|(_, value)| value.clone())
            .filter(|value| value.len() >= subagent_core::redact::MIN_SECRET_LEN)
            .collect();
        Ok((
            AgentProcess {
                child,
                group,
                stderr,
                secrets,
            },
            Pipes { stdin, stdout },
        ))
    }

    /// The newest [`STDERR_TAIL_BYTES`] of stderr, as text, with the
    /// command's environment values removed (credential shapes are
    /// scrubbed again by every `Diagnostic`).
    pub(crate) fn stderr_tail(&self) -> String {
        let bytes = self
            .stderr
            .lock()
            .map(|tail| tail.clone())
            .unwrap_or_default();
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        for secret in &self.secrets {
            text = text.replace(secret.as_str(), subagent_core::redact::REDACTED);
        }
        let text = text.trim();
        if text.len() <= STDERR_TAIL_BYTES {
            return text.to_owned();
        }
        // The newest bytes, from the first whole line among them.
        let mut cut = text.len() - STDERR_TAIL_BYTES;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        let tail = &text[cut..];
        tail.split_once('\n')
            .map_or(tail, |(_, rest)| rest)
            .to_owned()
    }

    /// Waits for the process to exit.
    pub(crate) async fn wait(&mut self) -> Option<ExitStatus> {
        self.child.wait().await.ok()
    }

    /// Kills the whole process group at once and reaps the child.
    pub(crate) async fn kill(&mut self) {
        self.kill_group();
        let _ = self.child.wait().await;
    }

    /// Sends SIGKILL to the process group (the agent and whatever it
    /// started), once.
    fn kill_group(&mut self) {
        if let Some(group) = self.group.take() {
            // SAFETY: kill(2) with a negative pid signals that process
            // group; it touches no memory of ours. The group is the one
            // `spawn` created for this child (its pid), signalled at most
            // once; after the child is reaped it still reaches what the
            // agent left running, and a group id is not reused while any
            // member lives.
            unsafe {
                libc::kill(-group, libc::SIGKILL);
            }
        }
    }
}

/// Describes an exit status: `status 3`, or `signal 9`.
pub(crate) fn describe_exit(status: Option<ExitStatus>) -> String {
    match status {
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("status {code}"),
            (None, Some(signal)) => format!("signal {signal}"),
            (None, None) => "an unknown status".to_owned(),
        },
        None => "an unknown status".to_owned(),
    }
}

impl Drop for AgentProcess {
    /// Kills the group: dropping the agent (dispose, shutdown, a failed
    /// start) leaves no process behind. `kill_on_drop` reaps the child.
    fn drop(&mut self) {
        self.kill_group();
    }
}
