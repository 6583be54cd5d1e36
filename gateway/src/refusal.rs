//! The refusals hyper answers itself, turned into the gateway's JSON: this
//! module owns what a client receives for a request whose head hyper cannot
//! parse, which never reaches the router.
//!
//! The contract, for every connection [`crate::serve`] accepts:
//! - hyper's three refusals carry the gateway's `{code, message}` body (the
//!   bytes of [`GatewayError::body`]) with their status:
//!   - 400 `gateway/bad-request`: a malformed request line or header, or an
//!     invalid `Content-Length` or `Transfer-Encoding`;
//!   - 414 `gateway/uri-too-long`: a URI over [`MAX_URI_BYTES`];
//!   - 431 `gateway/headers-too-large`: more than [`MAX_HEADERS`] headers,
//!     or a head (request line and headers) that has not ended once hyper
//!     holds [`MAX_HEAD_BYTES`] of it; hyper also answers 431 to a
//!     `Content-Length` of 2⁶⁴−2 or 2⁶⁴−1, which it cannot represent.
//! - The answer's head is the status line hyper chose, then
//!   `content-type: application/json`, the body's `content-length`,
//!   `connection: close` and hyper's `date`; then the connection closes.
//!   Answers to earlier requests on the connection (pipelined) go out first,
//!   unchanged.
//! - After the refusal the write side is shut down and the connection
//!   lingers, reading and discarding what the client still sends, until the
//!   client's end of stream, [`LINGER_BYTES`] or [`LINGER_TIME`]: closing a
//!   socket with unread input resets the connection, and the reset can
//!   discard the refusal before the client reads it.
//! - Nothing here panics on input or on a closed socket; an IO error ends
//!   the connection as it would without this module.
//!
//! How: [`RefusalListener`] wraps each accepted socket in [`RefusalIo`],
//! which reports that it does not write vectored, so hyper flattens each
//! write into one buffer. On a parse error hyper writes one bodiless head
//! (its status line and at most `connection: close`, `content-length: 0`
//! and `date`, with nothing after it), then only flushes and shuts the
//! connection down: it never reads or writes again. [`RefusalIo`] finds that
//! head at the end of a write, holds it back, and at shutdown writes the JSON
//! refusal in its place. The router never answers 400, 414 or 431 without a
//! JSON body, so its answers never match; should a matched head be followed
//! by a read or a write, it was not hyper's refusal and goes out unchanged.
//! The limits and the head's form are hyper's (1.x, as locked);
//! `tests/refusals.rs` fails if an upgrade changes either.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use axum::http::StatusCode;
use axum::serve::Listener;
use subagent_core::ErrorCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;

use crate::error::{GatewayError, JSON_MEDIA_TYPE};

/// The longest request URI hyper accepts, in bytes (its `MAX_URI_LEN`);
/// a longer one is answered 414.
pub(crate) const MAX_URI_BYTES: usize = 65_534;

/// The most headers hyper parses in a request (its default `max_headers`);
/// more are answered 431.
pub(crate) const MAX_HEADERS: usize = 100;

/// The size at which hyper stops reading an unfinished request head (its
/// default read buffer limit, 8 KiB + 400 KiB); such a head is answered 431.
/// Not a sharp bound: one read may take hyper past it, and a head that ends
/// within that read is served (a head of twice this is always refused).
pub(crate) const MAX_HEAD_BYTES: usize = 8_192 + 4_096 * 100;

/// The longest a connection lingers after a refusal.
pub(crate) const LINGER_TIME: Duration = Duration::from_secs(2);

/// The most bytes a connection reads and discards after a refusal.
pub(crate) const LINGER_BYTES: usize = 1 << 20;

/// Longer than any head hyper writes for a refusal (the 431 status line,
/// its three headers and the blank line are 123 bytes).
const MAX_REFUSAL_HEAD: usize = 256;

/// The message of hyper's 400.
const MALFORMED: &str = "the request's head does not parse: a malformed request line or \
                         header, or an invalid Content-Length or Transfer-Encoding";

/// A TCP listener whose connections answer hyper's refusals as JSON
/// ([`RefusalIo`]); accept errors are handled as axum's own listener does.
#[derive(Debug)]
pub(crate) struct RefusalListener(pub(crate) TcpListener);

impl Listener for RefusalListener {
    type Io = RefusalIo<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, address) = Listener::accept(&mut self.0).await;
        (RefusalIo::new(stream), address)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// A connection that replaces hyper's bodiless refusal with the gateway's
/// JSON one (the module's contract); everything else passes through.
#[derive(Debug)]
pub(crate) struct RefusalIo<T> {
    inner: T,
    /// A head that looks like hyper's refusal, written by hyper but not yet
    /// to `inner`.
    held: Option<Held>,
    /// Bytes owed to `inner` before anything else is written to it: a held
    /// head released unchanged, or the JSON refusal.
    owed: Vec<u8>,
    /// How much of `owed` is written.
    owed_written: usize,
    /// Where the shutdown after a JSON refusal stands; `None` without one.
    closing: Option<Closing>,
}

/// A head held back, and what replaces it.
#[derive(Debug)]
struct Held {
    /// The bytes hyper wrote.
    raw: Vec<u8>,
    /// The JSON refusal written instead at shutdown.
    replacement: Vec<u8>,
    /// The refusal's code.
    code: ErrorCode,
}

/// The steps of a shutdown that follows a JSON refusal.
#[derive(Debug)]
enum Closing {
    /// The refusal is being written; then `inner` is flushed and shut down.
    Writing,
    /// The write side is shut down: reading and discarding the client's
    /// input until its end, the byte bound or the deadline.
    Lingering {
        deadline: Pin<Box<Sleep>>,
        drained: usize,
    },
    /// Done: a later shutdown is a no-op.
    Closed,
}

impl<T> RefusalIo<T> {
    /// `inner`, with hyper's refusals answered as JSON.
    pub(crate) fn new(inner: T) -> RefusalIo<T> {
        RefusalIo {
            inner,
            held: None,
            owed: Vec::new(),
            owed_written: 0,
            closing: None,
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> RefusalIo<T> {
    /// A held head followed by other IO was not hyper's refusal: it is owed
    /// unchanged.
    fn release(&mut self) {
        if let Some(held) = self.held.take() {
            self.owe(held.raw);
        }
    }

    fn owe(&mut self, bytes: Vec<u8>) {
        self.owed.drain(..self.owed_written);
        self.owed_written = 0;
        self.owed.extend_from_slice(&bytes);
    }

    /// Writes what is owed to `inner`.
    fn poll_owed(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.owed_written < self.owed.len() {
            let written =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.owed[self.owed_written..]))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.owed_written += written;
        }
        self.owed.clear();
        self.owed_written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for RefusalIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.release();
        // A released head goes out now; if `inner` cannot take it yet, the
        // next write, flush or read tries again.
        if let Poll::Ready(Err(error)) = this.poll_owed(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RefusalIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.release();
        ready!(this.poll_owed(cx))?;
        match find_refusal(buf) {
            Some((0, held)) => {
                this.held = Some(held);
                Poll::Ready(Ok(buf.len()))
            }
            // What precedes the refusal first, so the refusal itself is
            // never written in part.
            Some((start, _)) => Pin::new(&mut this.inner).poll_write(cx, &buf[..start]),
            None => Pin::new(&mut this.inner).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_owed(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(held) = this.held.take() {
            tracing::debug!(code = %held.code, "answering hyper's refusal of a request head");
            this.owe(held.replacement);
            this.closing = Some(Closing::Writing);
        }
        ready!(this.poll_owed(cx))?;
        loop {
            match &mut this.closing {
                None => return Pin::new(&mut this.inner).poll_shutdown(cx),
                Some(Closing::Writing) => {
                    ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
                    ready!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
                    this.closing = Some(Closing::Lingering {
                        deadline: Box::pin(tokio::time::sleep(LINGER_TIME)),
                        drained: 0,
                    });
                }
                Some(Closing::Lingering { deadline, drained }) => {
                    ready!(linger(&mut this.inner, deadline.as_mut(), drained, cx));
                    this.closing = Some(Closing::Closed);
                }
                Some(Closing::Closed) => return Poll::Ready(Ok(())),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        // hyper then flattens its writes, so a refusal's head is the end of
        // one write.
        false
    }
}

/// Reads and discards `inner`'s input until its end, an error,
/// [`LINGER_BYTES`] in all or `deadline`.
fn linger<T: AsyncRead + Unpin>(
    inner: &mut T,
    mut deadline: Pin<&mut Sleep>,
    drained: &mut usize,
    cx: &mut Context<'_>,
) -> Poll<()> {
    let mut scratch = [0u8; 8_192];
    while *drained < LINGER_BYTES {
        let mut buf = ReadBuf::new(&mut scratch);
        match Pin::new(&mut *inner).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(()),
            Poll::Ready(Ok(())) => *drained += buf.filled().len(),
            Poll::Ready(Err(_)) => return Poll::Ready(()),
            Poll::Pending => return deadline.as_mut().poll(cx),
        }
    }
    Poll::Ready(())
}

/// Where in `buf` a refusal head of hyper's starts, with what replaces it,
/// if `buf` ends with one.
fn find_refusal(buf: &[u8]) -> Option<(usize, Held)> {
    if !buf.ends_with(b"\r\n\r\n") {
        return None;
    }
    let from = buf.len().saturating_sub(MAX_REFUSAL_HEAD);
    (from..buf.len())
        .filter(|&start| buf[start..].starts_with(b"HTTP/1."))
        .find_map(|start| held(&buf[start..]).map(|held| (start, held)))
}

/// `head` as a held refusal, if it is exactly a head hyper writes for one:
/// `HTTP/1.1` or `HTTP/1.0`, status 400, 414 or 431 with its canonical
/// reason, then only `connection: close` (required for HTTP/1.1),
/// `content-length: 0` and `date`, each at most once, then the blank line.
fn held(head: &[u8]) -> Option<Held> {
    let text = std::str::from_utf8(head).ok()?.strip_suffix("\r\n\r\n")?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next()?;
    let (version, status) = status_line.split_once(' ')?;
    let (number, reason) = status.split_once(' ')?;
    let status = StatusCode::from_bytes(number.as_bytes()).ok()?;
    if status.canonical_reason() != Some(reason) {
        return None;
    }
    let error = match status {
        StatusCode::BAD_REQUEST => GatewayError::bad_request(MALFORMED),
        StatusCode::URI_TOO_LONG => GatewayError::UriTooLong {
            limit: MAX_URI_BYTES,
        },
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => GatewayError::HeadersTooLarge {
            headers: MAX_HEADERS,
            bytes: MAX_HEAD_BYTES,
        },
        _ => return None,
    };
    let (mut close, mut length, mut date) = (false, false, None);
    for line in lines {
        match line {
            "connection: close" if !close => close = true,
            "content-length: 0" if !length => length = true,
            _ => {
                let value = line.strip_prefix("date: ")?;
                if date.is_some()
                    || value.is_empty()
                    || !value.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
                {
                    return None;
                }
                date = Some(value);
            }
        }
    }
    match version {
        "HTTP/1.1" if close => {}
        "HTTP/1.0" => {}
        _ => return None,
    }
    let body = error.body();
    let mut replacement = Vec::with_capacity(status_line.len() + 160 + body.len());
    for part in [
        status_line,
        "\r\ncontent-type: ",
        JSON_MEDIA_TYPE,
        "\r\ncontent-length: ",
        &body.len().to_string(),
        "\r\nconnection: close\r\n",
    ] {
        replacement.extend_from_slice(part.as_bytes());
    }
    if let Some(date) = date {
        replacement.extend_from_slice(format!("date: {date}\r\n").as_bytes());
    }
    replacement.extend_from_slice(b"\r\n");
    replacement.extend_from_slice(&body);
    Some(Held {
        raw: head.to_vec(),
        replacement,
        code: error.code(),
    })
}

#[cfg(test)]
#[path = "refusal_tests.rs"]
mod tests;
