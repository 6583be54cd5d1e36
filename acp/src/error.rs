//! [`AcpError`]: what can go wrong talking to an agent over ACP, each with
//! a stable code (`acp/…`). Texts name the program, the request and the
//! agent's redacted stderr tail, never a prompt or a file's contents.

use std::time::Duration;

use subagent_core::{ErrorCode, SubagentError};

use crate::intake::LineFault;

/// A failure of an agent process or of the protocol with it.
#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    /// The program could not be started.
    #[error("starting the ACP agent {program} failed: {kind}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error's kind.
        kind: std::io::ErrorKind,
    },
    /// `initialize` was not answered in time; the process was killed.
    #[error(
        "the ACP agent {program} did not answer initialize within {after:?}; it was killed{}",
        tail(stderr)
    )]
    InitializeTimeout {
        /// The program.
        program: String,
        /// The limit.
        after: Duration,
        /// Its redacted stderr tail.
        stderr: String,
    },
    /// `session/new` or `session/load` was not answered in time; the
    /// process was killed.
    #[error(
        "the ACP agent did not answer {request} within {after:?}; it was killed{}",
        tail(stderr)
    )]
    SessionTimeout {
        /// The request.
        request: &'static str,
        /// The limit.
        after: Duration,
        /// Its redacted stderr tail.
        stderr: String,
    },
    /// The agent answered a request with a JSON-RPC error.
    #[error(
        "the ACP agent answered {request} with error {code}: {message}{}",
        tail(stderr)
    )]
    Protocol {
        /// The request (`session/prompt`, …).
        request: &'static str,
        /// The JSON-RPC error code.
        code: i32,
        /// Its message.
        message: String,
        /// The agent's redacted stderr tail.
        stderr: String,
    },
    /// The process exited, or closed its stdout, during `request`.
    #[error("the ACP agent exited with {status} during {request}{}", tail(stderr))]
    Exited {
        /// The request that was in flight.
        request: &'static str,
        /// `status 3`, `signal 9`, …
        status: String,
        /// Its redacted stderr tail.
        stderr: String,
    },
    /// The agent's stdout broke the protocol's framing (a line too long,
    /// or not JSON); the process was killed.
    #[error("{fault} during {request}; it was killed{}", tail(stderr))]
    Malformed {
        /// The request that was in flight.
        request: &'static str,
        /// What was wrong with the line.
        fault: LineFault,
        /// Its redacted stderr tail.
        stderr: String,
    },
    /// A turn's assistant message grew past the content limit; the process
    /// was killed, since nothing more of it could be recorded.
    #[error(
        "the ACP agent's message grew past the {limit}-byte limit; it was killed{}",
        tail(stderr)
    )]
    OutputTooLarge {
        /// The limit ([`subagent_core::MAX_CONTENT_BYTES`]).
        limit: usize,
        /// Its redacted stderr tail.
        stderr: String,
    },
    /// The agent sent nothing for the idle limit during a turn, so the
    /// turn was cancelled.
    #[error(
        "the ACP agent sent nothing for {after:?} during a turn; it was cancelled{}{}",
        if *killed { " and, not answering, killed" } else { "" },
        tail(stderr)
    )]
    IdleTimeout {
        /// The idle limit.
        after: Duration,
        /// Whether it also left `session/cancel` unanswered, and its
        /// process group was killed.
        killed: bool,
        /// Its redacted stderr tail.
        stderr: String,
    },
    /// A cancelled turn was not answered `cancelled` within the grace
    /// period; the process group was killed.
    #[error(
        "the ACP agent did not answer session/cancel within {after:?}; it was killed{}",
        tail(stderr)
    )]
    CancelUnanswered {
        /// The grace period.
        after: Duration,
        /// Its redacted stderr tail.
        stderr: String,
    },
}

/// `; stderr: …` when there is a tail.
fn tail(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; stderr: {stderr}")
    }
}

impl AcpError {
    /// `code: text`, as a turn that ends on this error records it in its
    /// diagnostic.
    #[must_use]
    pub fn diagnostic(&self) -> String {
        format!("{}: {self}", self.code())
    }

    /// The stable code.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            AcpError::Spawn { .. } => ErrorCode::AcpSpawn,
            AcpError::InitializeTimeout { .. } => ErrorCode::AcpInitializeTimeout,
            AcpError::SessionTimeout { .. } => ErrorCode::AcpSessionTimeout,
            AcpError::Protocol { .. } => ErrorCode::AcpProtocol,
            AcpError::Exited { .. } => ErrorCode::AcpExited,
            AcpError::Malformed { .. } => ErrorCode::AcpProtocol,
            AcpError::OutputTooLarge { .. } => ErrorCode::AcpOutputTooLarge,
            AcpError::IdleTimeout { .. } => ErrorCode::AcpIdleTimeout,
            AcpError::CancelUnanswered { .. } => ErrorCode::AcpCancelUnanswered,
        }
    }
}

impl From<AcpError> for SubagentError {
    /// An agent that cannot run is an infrastructure fault of the child
    /// (`gateway/internal`, the `AcpError` kept as its cause).
    fn from(err: AcpError) -> SubagentError {
        SubagentError::internal_from(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_has_its_own_stable_code_and_names_its_stderr() {
        let after = Duration::from_millis(5);
        let stderr = String::from("boom");
        let cases = [
            (
                AcpError::Spawn {
                    program: "x".into(),
                    kind: std::io::ErrorKind::NotFound,
                },
                "acp/spawn",
            ),
            (
                AcpError::InitializeTimeout {
                    program: "x".into(),
                    after,
                    stderr: stderr.clone(),
                },
                "acp/initialize-timeout",
            ),
            (
                AcpError::SessionTimeout {
                    request: "session/new",
                    after,
                    stderr: stderr.clone(),
                },
                "acp/session-timeout",
            ),
            (
                AcpError::Protocol {
                    request: "session/prompt",
                    code: -32603,
                    message: "m".into(),
                    stderr: stderr.clone(),
                },
                "acp/protocol",
            ),
            (
                AcpError::Exited {
                    request: "initialize",
                    status: "status 3".into(),
                    stderr: stderr.clone(),
                },
                "acp/exited",
            ),
            (
                AcpError::CancelUnanswered { after, stderr },
                "acp/cancel-unanswered",
            ),
        ];
        for (error, code) in cases {
            assert_eq!(error.code().as_str(), code);
            let text = error.to_string();
            if !matches!(error, AcpError::Spawn { .. }) {
                assert!(text.ends_with("; stderr: boom"), "{text}");
            }
        }
        let quiet = AcpError::CancelUnanswered {
            after,
            stderr: String::new(),
        };
        assert!(
            !quiet.to_string().contains("stderr"),
            "no empty tail is named"
        );
    }
}
