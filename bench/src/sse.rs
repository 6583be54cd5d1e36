//! [`Frames`]: the frames of a `GET /v1/events` answer, read as they
//! arrive. Only what the benches use is parsed: the `id:` (the log
//! position) and the `event:` type; data lines are skipped.

use subagent_core::SubagentError;

/// One Server-Sent Events frame.
pub(super) struct Frame {
    /// The `id:` line: the log position of an event frame.
    pub(super) id: Option<u64>,
    /// The `event:` line: the event type, or `caught-up`.
    pub(super) event: String,
}

/// The frames of one event stream, in order.
pub(super) struct Frames {
    response: reqwest::Response,
    pending: Vec<u8>,
}

impl Frames {
    /// Opens `base/v1/events?QUERY` with `token`.
    pub(super) async fn open(
        http: &reqwest::Client,
        base: &str,
        query: &str,
        token: &str,
    ) -> Result<Frames, SubagentError> {
        let response = http
            .get(format!("{base}/v1/events?{query}"))
            .bearer_auth(token)
            .send()
            .await
            .map_err(SubagentError::internal_from)?;
        if !response.status().is_success() {
            return Err(SubagentError::internal(format!(
                "the event stream answered {}",
                response.status()
            )));
        }
        Ok(Frames {
            response,
            pending: Vec::new(),
        })
    }

    /// The next whole frame; `None` once the stream ends.
    pub(super) async fn next(&mut self) -> Result<Option<Frame>, SubagentError> {
        loop {
            // Frames end with a blank line.
            if let Some(end) = self.pending.windows(2).position(|pair| pair == b"\n\n") {
                let frame: Vec<u8> = self.pending.drain(..end + 2).collect();
                return Ok(Some(parse(&frame)));
            }
            match self
                .response
                .chunk()
                .await
                .map_err(SubagentError::internal_from)?
            {
                None => return Ok(None),
                Some(chunk) => self.pending.extend_from_slice(&chunk),
            }
        }
    }
}

/// The `id:` and `event:` of one frame's lines.
fn parse(frame: &[u8]) -> Frame {
    let mut parsed = Frame {
        id: None,
        event: String::new(),
    };
    for line in frame.split(|byte| *byte == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        if let Some(id) = line.strip_prefix("id:") {
            parsed.id = id.trim().parse().ok();
        } else if let Some(event) = line.strip_prefix("event:") {
            event.trim().clone_into(&mut parsed.event);
        }
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_frame_gives_its_id_and_event() {
        let frame = parse(b"id: 42\nevent: ChildCataloged\ndata: {\"a\":1}\n\n");
        assert_eq!(
            (frame.id, frame.event.as_str()),
            (Some(42), "ChildCataloged")
        );
        let caught = parse(b"event:caught-up\ndata:{\"head\":9}\n\n");
        assert_eq!((caught.id, caught.event.as_str()), (None, "caught-up"));
    }
}
