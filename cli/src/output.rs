//! The one way command output reaches stdout.
//!
//! [`Output`] is a buffered writer over the locked stdout that every command
//! writes to with `write!`/`writeln!` (each returning `io::Result`); `main`
//! flushes it once at the end. It remembers the first write error, so `main`
//! can decide the exit however the error travelled up (bare, or wrapped in a
//! serde or replay error):
//!
//! - a closed pipe (`EPIPE`, e.g. `subagents tree D | head -1`) ends the
//!   command quietly with exit status 0: the reader asked for no more;
//! - any other write error (e.g. `> /dev/full`) is one line on stderr,
//!   `error: writing to stdout: <OS error>`, and exit status 1.

use std::io::{self, BufWriter, ErrorKind, StdoutLock, Write};

/// What became of the output, for the exit status.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Every write and the final flush succeeded.
    Delivered,
    /// The reader closed the pipe; the rest of the output was not wanted.
    ReaderGone,
    /// Writing failed for another reason (disk full, closed descriptor...).
    Failed(ErrorKind, String),
}

/// A buffered writer that records its first failure.
pub(crate) struct Output<W: Write> {
    inner: BufWriter<W>,
    first_failure: Option<(ErrorKind, String)>,
}

/// The process's stdout, locked for the command's lifetime.
pub(crate) type Stdout = Output<StdoutLock<'static>>;

impl Stdout {
    /// The locked, buffered stdout.
    #[must_use]
    pub(crate) fn stdout() -> Stdout {
        Output::new(io::stdout().lock())
    }
}

impl<W: Write> Output<W> {
    /// Wraps `inner` with a buffer.
    pub(crate) fn new(inner: W) -> Self {
        Output {
            inner: BufWriter::new(inner),
            first_failure: None,
        }
    }

    fn remember<T>(&mut self, result: io::Result<T>) -> io::Result<T> {
        if let Err(err) = &result {
            if self.first_failure.is_none() {
                self.first_failure = Some((err.kind(), err.to_string()));
            }
        }
        result
    }

    /// Flushes what is buffered and reports what became of the output.
    pub(crate) fn finish(&mut self) -> Fate {
        let _ = self.flush();
        match &self.first_failure {
            None => Fate::Delivered,
            Some((ErrorKind::BrokenPipe, _)) => Fate::ReaderGone,
            Some((kind, message)) => Fate::Failed(*kind, message.clone()),
        }
    }
}

impl<W: Write> Write for Output<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let result = self.inner.write(bytes);
        self.remember(result)
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        let result = self.inner.write_all(bytes);
        self.remember(result)
    }

    fn flush(&mut self) -> io::Result<()> {
        let result = self.inner.flush();
        self.remember(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Accepts `room` bytes, then fails every write with `kind`.
    struct Failing {
        room: usize,
        kind: ErrorKind,
        written: Vec<u8>,
    }

    impl Write for Failing {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::Error::from(self.kind));
            }
            let taken = bytes.len().min(self.room);
            self.room -= taken;
            self.written.extend_from_slice(&bytes[..taken]);
            Ok(taken)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn failing(room: usize, kind: ErrorKind) -> Output<Failing> {
        Output::new(Failing {
            room,
            kind,
            written: Vec::new(),
        })
    }

    #[test]
    fn delivered_output_is_flushed_by_finish() {
        let mut out = failing(1 << 20, ErrorKind::Other);
        writeln!(out, "small").unwrap();
        assert_eq!(out.finish(), Fate::Delivered);
        assert_eq!(out.inner.get_ref().written, b"small\n");
    }

    #[test]
    fn a_closed_pipe_is_the_reader_gone_even_when_the_error_was_wrapped() {
        let mut out = failing(4, ErrorKind::BrokenPipe);
        // serde_json wraps the io error in its own type: the fate still knows.
        let result = serde_json::to_writer(&mut out, &vec!["x"; 10_000]);
        assert!(result.is_err());
        assert_eq!(out.finish(), Fate::ReaderGone);
    }

    #[test]
    fn another_write_error_is_a_failure_found_at_the_final_flush() {
        let mut out = failing(0, ErrorKind::StorageFull);
        writeln!(out, "fits in the buffer").unwrap();
        assert!(matches!(
            out.finish(),
            Fate::Failed(ErrorKind::StorageFull, _)
        ));
    }
}
