//! [`intake`]: the agent's stdout as the protocol's incoming lines, with
//! nothing the agent says lost and nothing it sends unbounded.
//!
//! Each line is checked before the protocol library sees it:
//! - a line over [`MAX_LINE_BYTES`], or one that is not JSON, ends the
//!   connection and is kept as its [`LineFault`], so the turn settles
//!   `error` with `acp/protocol` naming it (not as an exited process);
//! - a `session/update` notification is handed to the turn's channel here,
//!   awaiting room in it. While the channel is full no further line is
//!   read, so a flooding agent blocks on its own stdout (backpressure)
//!   instead of having its updates dropped or queued without bound;
//! - every other line (responses, the agent's requests) goes on to the
//!   protocol library, in order. An update sent before a response is in the
//!   channel before the library sees that response.
//!
//! Blank lines are skipped.

use std::sync::{Arc, OnceLock};

use agent_client_protocol::v1::schema as s;
use futures::{Stream, StreamExt as _};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::AsyncRead;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

use crate::connection::Inbound;

/// The longest line (one JSON-RPC message) read from an agent; a longer
/// one ends the connection rather than grow without bound.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Why the client stopped reading an agent's stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineFault {
    /// A line longer than [`MAX_LINE_BYTES`].
    #[error("the agent sent a line over {limit} bytes (line exceeds {} MiB)", limit / (1024 * 1024))]
    TooLong {
        /// The limit.
        limit: usize,
    },
    /// A line that is not JSON (its text is not quoted: it may hold
    /// anything).
    #[error("the agent sent a line that is not JSON (at line {line}, column {column} of it)")]
    NotJson {
        /// Where parsing failed: serde_json's line within the text.
        line: usize,
        /// And column.
        column: usize,
    },
}

/// Where a connection keeps the fault that ended its intake, if one did.
/// Set at most once; read by whoever explains the connection's end.
#[derive(Clone, Debug, Default)]
pub(crate) struct FaultSlot(Arc<OnceLock<LineFault>>);

impl FaultSlot {
    /// The fault, once one ended the intake.
    pub(crate) fn get(&self) -> Option<LineFault> {
        self.0.get().copied()
    }

    fn set(&self, fault: LineFault) {
        let _ = self.0.set(fault);
    }
}

/// What one line of the agent's stdout is.
enum Line {
    /// A `session/update` notification, parsed.
    Update(Box<s::SessionNotification>),
    /// Anything else that is JSON: for the protocol library.
    Other(String),
    /// Nothing but white space.
    Blank,
}

/// The fields of a JSON-RPC message this module looks at.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    id: Option<serde::de::IgnoredAny>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

/// Classifies one line. An update whose parameters the schema does not
/// take goes on to the library, which answers it as it answers any
/// malformed message.
fn classify(line: String) -> Result<Line, LineFault> {
    if line.trim().is_empty() {
        return Ok(Line::Blank);
    }
    let update = match serde_json::from_str::<Envelope<'_>>(&line) {
        Ok(envelope) => match (envelope.method.as_deref(), envelope.id, envelope.params) {
            (Some("session/update"), None, Some(params)) => {
                serde_json::from_str::<s::SessionNotification>(params.get()).ok()
            }
            _ => None,
        },
        // Not an object: JSON of another shape is the library's to answer.
        Err(_) => match serde_json::from_str::<&RawValue>(&line) {
            Ok(_) => None,
            Err(err) => {
                return Err(LineFault::NotJson {
                    line: err.line(),
                    column: err.column(),
                })
            }
        },
    };
    Ok(match update {
        Some(update) => Line::Update(Box::new(update)),
        None => Line::Other(line),
    })
}

/// The state [`intake`] carries from line to line.
struct Reader<R> {
    lines: FramedRead<R, LinesCodec>,
    to_turn: mpsc::Sender<Inbound>,
    fault: FaultSlot,
    ended: bool,
}

/// The agent's `stdout` as the protocol library's incoming lines, updates
/// taken out into `to_turn` (see the module's contract). A [`LineFault`]
/// is kept in `fault` and ends the stream with an `InvalidData` error.
pub(crate) fn intake<R>(
    stdout: R,
    to_turn: mpsc::Sender<Inbound>,
    fault: FaultSlot,
) -> impl Stream<Item = std::io::Result<String>> + Send + 'static
where
    R: AsyncRead + Send + Unpin + 'static,
{
    let reader = Reader {
        lines: FramedRead::new(stdout, LinesCodec::new_with_max_length(MAX_LINE_BYTES)),
        to_turn,
        fault,
        ended: false,
    };
    futures::stream::unfold(reader, |mut reader| async move {
        if reader.ended {
            return None;
        }
        loop {
            let faulted = match reader.lines.next().await? {
                Ok(line) => match classify(line) {
                    Ok(Line::Blank) => continue,
                    Ok(Line::Update(update)) => {
                        // Closed: the connection is being torn down, and
                        // no turn is left to record the update.
                        let _ = reader.to_turn.send(Inbound::Update(*update)).await;
                        continue;
                    }
                    Ok(Line::Other(line)) => return Some((Ok(line), reader)),
                    Err(fault) => fault,
                },
                Err(LinesCodecError::MaxLineLengthExceeded) => LineFault::TooLong {
                    limit: MAX_LINE_BYTES,
                },
                Err(LinesCodecError::Io(err)) => {
                    reader.ended = true;
                    return Some((Err(err), reader));
                }
            };
            reader.fault.set(faulted);
            reader.ended = true;
            let err = std::io::Error::new(std::io::ErrorKind::InvalidData, faulted);
            return Some((Err(err), reader));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update_line(text: &str) -> String {
        serde_json::json!({
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {
                "sessionId": "s1",
                "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
            }
        })
        .to_string()
    }

    async fn read_all(
        input: &str,
        capacity: usize,
    ) -> (Vec<std::io::Result<String>>, Vec<Inbound>, FaultSlot) {
        let (to_turn, mut inbound) = mpsc::channel(capacity);
        let fault = FaultSlot::default();
        let stream = intake(
            std::io::Cursor::new(input.as_bytes().to_vec()),
            to_turn,
            fault.clone(),
        );
        let reading = tokio::spawn(stream.collect::<Vec<_>>());
        let mut updates = Vec::new();
        while let Some(item) = inbound.recv().await {
            updates.push(item);
        }
        (reading.await.expect("the intake runs"), updates, fault)
    }

    fn texts(updates: &[Inbound]) -> String {
        updates
            .iter()
            .map(|item| match item {
                Inbound::Update(update) => match &update.update {
                    s::SessionUpdate::AgentMessageChunk(chunk) => match &chunk.content {
                        s::ContentBlock::Text(text) => text.text.clone(),
                        other => panic!("unexpected content {other:?}"),
                    },
                    other => panic!("unexpected update {other:?}"),
                },
                _ => panic!("only updates are taken out"),
            })
            .collect()
    }

    #[tokio::test]
    async fn every_update_reaches_the_turn_through_a_channel_far_smaller_than_the_flood() {
        let mut input = String::new();
        for n in 0..10_000 {
            input.push_str(&update_line(&(n % 10).to_string()));
            input.push('\n');
        }
        input.push_str(r#"{"jsonrpc":"2.0","id":1,"result":{"stopReason":"end_turn"}}"#);
        input.push('\n');
        let (lines, updates, fault) = read_all(&input, 4).await;
        assert_eq!(updates.len(), 10_000, "no update is dropped");
        let expected: String = (0..10_000).map(|n| (n % 10).to_string()).collect();
        assert_eq!(texts(&updates), expected, "in order");
        assert_eq!(lines.len(), 1, "only the response goes on to the library");
        assert!(lines[0]
            .as_ref()
            .is_ok_and(|line| line.contains("end_turn")));
        assert_eq!(fault.get(), None);
    }

    #[tokio::test]
    async fn requests_responses_and_other_json_go_on_in_order_and_blank_lines_are_skipped() {
        let input = format!(
            "{}\n\n   \n{}\n[1,2]\n{}\n",
            r#"{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file","params":{"sessionId":"s1","path":"/a"}}"#,
            update_line("x"),
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"no_such_update"}}}"#,
        );
        let (lines, updates, fault) = read_all(&input, 8).await;
        assert_eq!(texts(&updates), "x");
        let lines: Vec<String> = lines
            .into_iter()
            .map(|line| line.expect("no fault"))
            .collect();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].contains("fs/read_text_file"));
        assert_eq!(lines[1], "[1,2]");
        assert!(
            lines[2].contains("no_such_update"),
            "an update the schema refuses is the library's"
        );
        assert_eq!(fault.get(), None);
    }

    #[tokio::test]
    async fn a_line_that_is_not_json_ends_the_intake_with_its_fault() {
        let input = format!(
            "{}\nnot json at all\n{}\n",
            update_line("a"),
            update_line("b")
        );
        let (lines, updates, fault) = read_all(&input, 8).await;
        assert_eq!(texts(&updates), "a", "nothing after the fault is read");
        assert_eq!(lines.len(), 1);
        let err = lines[0].as_ref().expect_err("the fault ends the stream");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(fault.get(), Some(LineFault::NotJson { line: 1, column: 2 }));
        assert!(
            !err.to_string().contains("not json at all"),
            "the line is not quoted"
        );
    }

    #[tokio::test]
    async fn a_line_over_the_limit_ends_the_intake_naming_the_limit() {
        let mut input = "x".repeat(MAX_LINE_BYTES + 10);
        input.push('\n');
        input.push_str(&update_line("late"));
        input.push('\n');
        let (lines, updates, fault) = read_all(&input, 8).await;
        assert!(updates.is_empty());
        assert_eq!(lines.len(), 1);
        assert!(lines[0].is_err());
        assert_eq!(
            fault.get(),
            Some(LineFault::TooLong {
                limit: MAX_LINE_BYTES
            })
        );
        assert_eq!(
            LineFault::TooLong {
                limit: MAX_LINE_BYTES
            }
            .to_string(),
            "the agent sent a line over 16777216 bytes (line exceeds 16 MiB)"
        );
    }
}
