//! [`AcpCommand`]: how to start one ACP agent process (program, arguments,
//! environment, working directory) and the time limits its client keeps.

use std::path::PathBuf;
use std::time::Duration;

/// The time limits of one agent process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcpTimeouts {
    /// How long `initialize` may take before the process is killed and the
    /// start fails (`acp/initialize-timeout`).
    pub initialize: Duration,
    /// How long `session/new` or `session/load` may take before the process
    /// is killed and the turn fails (`acp/session-timeout`).
    pub session: Duration,
    /// How long a cancelled turn may take to answer `cancelled` after
    /// `session/cancel` before the process group is killed and the turn
    /// settles `error`.
    pub cancel_grace: Duration,
    /// How long an agent may send nothing during a turn (no update, no
    /// request, no answer) before the turn is cancelled as above and
    /// settles `error` (`acp/idle-timeout`). Time the client spends on the
    /// agent's own requests is not counted.
    pub idle: Duration,
}

impl Default for AcpTimeouts {
    fn default() -> Self {
        AcpTimeouts {
            initialize: Duration::from_secs(30),
            session: Duration::from_secs(30),
            cancel_grace: Duration::from_secs(5),
            idle: Duration::from_secs(600),
        }
    }
}

/// One agent command: run as a child process in its own process group,
/// spoken to over its stdin and stdout; stderr is kept as a bounded tail
/// for diagnostics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcpCommand {
    /// The program (looked up on `PATH` when not a path).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables set on top of the host's environment. Their
    /// values are removed from every diagnostic.
    pub env: Vec<(String, String)>,
    /// The agent's working directory and the ACP session's `cwd`: the
    /// directory its file-system calls are confined to. Absolute.
    pub cwd: PathBuf,
    /// Time limits.
    pub timeouts: AcpTimeouts,
}

/// A command line that names no program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the agent command is empty")]
pub struct EmptyCommand;

impl AcpCommand {
    /// `program args…`, in the current directory, with the default time
    /// limits.
    #[must_use]
    pub fn new(program: &str, args: &[&str]) -> AcpCommand {
        AcpCommand {
            program: program.to_owned(),
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            env: Vec::new(),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            timeouts: AcpTimeouts::default(),
        }
    }

    /// Splits `line` at white space into a program and its arguments (no
    /// quoting: `subagents demo --acp "npx @zed-industries/claude-code-acp"`).
    ///
    /// # Errors
    /// [`EmptyCommand`] for a blank line.
    pub fn parse(line: &str) -> Result<AcpCommand, EmptyCommand> {
        let mut words = line.split_whitespace();
        let program = words.next().ok_or(EmptyCommand)?;
        let args: Vec<&str> = words.collect();
        Ok(AcpCommand::new(program, &args))
    }

    /// Sets `name=value` in the agent's environment.
    #[must_use]
    pub fn env(mut self, name: &str, value: &str) -> AcpCommand {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Runs the agent in `dir` (made absolute against the current
    /// directory, `.` and `..` resolved).
    #[must_use]
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> AcpCommand {
        let dir = dir.into();
        let absolute = if dir.is_absolute() {
            dir
        } else {
            std::env::current_dir().map_or(dir.clone(), |here| here.join(&dir))
        };
        let mut normal = PathBuf::new();
        for component in absolute.components() {
            match component {
                std::path::Component::ParentDir => {
                    normal.pop();
                }
                std::path::Component::CurDir => {}
                other => normal.push(other),
            }
        }
        self.cwd = normal;
        self
    }

    /// Replaces the time limits.
    #[must_use]
    pub fn timeouts(mut self, timeouts: AcpTimeouts) -> AcpCommand {
        self.timeouts = timeouts;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_splits_into_program_and_arguments() {
        let command = AcpCommand::parse("  npx  @zed/claude-code-acp --verbose ").unwrap();
        assert_eq!(command.program, "npx");
        assert_eq!(command.args, ["@zed/claude-code-acp", "--verbose"]);
        assert_eq!(AcpCommand::parse(" \t "), Err(EmptyCommand));
    }

    #[test]
    fn a_relative_directory_becomes_absolute() {
        let command = AcpCommand::new("agent", &[]).cwd("work");
        assert!(command.cwd.is_absolute());
        assert!(command.cwd.ends_with("work"));
        let climbed = AcpCommand::new("agent", &[]).cwd("/a/b/../c/./d");
        assert_eq!(climbed.cwd, PathBuf::from("/a/c/d"));
    }
}
