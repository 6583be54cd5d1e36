//! [`BoundedLines`]: reads an import line by line without ever holding more
//! than one line of at most its limit (plus one byte) in memory, so an
//! oversized line is refused as soon as it passes the limit, not after it
//! was read whole. Lines that open with one given prefix (an export's
//! attachment lines) may run to a second, larger limit.

use std::io::{BufRead, Read};

use crate::error::ReplayError;

/// Lines of at most `limit` bytes (without `\n` or `\r\n`).
pub(crate) struct BoundedLines<R> {
    input: R,
    limit: usize,
    /// Lines that start with this prefix may be up to this long.
    longer: Option<(&'static [u8], usize)>,
    line: usize,
    buffer: Vec<u8>,
}

impl<R: BufRead> BoundedLines<R> {
    pub(crate) fn new(input: R, limit: usize) -> Self {
        BoundedLines {
            input,
            limit,
            longer: None,
            line: 0,
            buffer: Vec::new(),
        }
    }

    /// Lets lines that start with `prefix` be up to `limit` bytes long (a
    /// limit larger than the general one; the prefix is checked once the
    /// general limit is reached, so other lines still cost at most it).
    pub(crate) fn allow_longer(mut self, prefix: &'static [u8], limit: usize) -> Self {
        self.longer = Some((prefix, limit));
        self
    }

    /// The next line and its 1-based number, or `None` at the end.
    ///
    /// # Errors
    /// [`ReplayError::LineTooLong`] once a line passes the limit (having read
    /// `limit + 1` bytes of it); [`ReplayError::Io`] for a read failure.
    pub(crate) fn next_line(&mut self) -> Result<Option<(usize, &[u8])>, ReplayError> {
        self.buffer.clear();
        let allowed = u64::try_from(self.limit)
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let read = (&mut self.input)
            .take(allowed)
            .read_until(b'\n', &mut self.buffer)?;
        if read == 0 {
            return Ok(None);
        }
        self.line += 1;
        let mut limit = self.limit;
        if let Some((prefix, longer)) = self.longer {
            let unfinished = !self.buffer.ends_with(b"\n");
            if unfinished && self.buffer.len() > self.limit && self.buffer.starts_with(prefix) {
                limit = longer;
                let rest = u64::try_from(longer.saturating_sub(self.limit)).unwrap_or(u64::MAX);
                (&mut self.input)
                    .take(rest.saturating_add(1))
                    .read_until(b'\n', &mut self.buffer)?;
            }
        }
        let mut content = self.buffer.as_slice();
        if let Some(stripped) = content.strip_suffix(b"\n") {
            content = stripped.strip_suffix(b"\r").unwrap_or(stripped);
        }
        if content.len() > limit {
            return Err(ReplayError::LineTooLong {
                line: self.line,
                limit,
            });
        }
        Ok(Some((self.line, content)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn all(text: &str, limit: usize) -> Result<Vec<(usize, String)>, ReplayError> {
        let mut lines = BoundedLines::new(Cursor::new(text.to_owned()), limit);
        let mut out = Vec::new();
        while let Some((number, line)) = lines.next_line()? {
            out.push((number, String::from_utf8_lossy(line).into_owned()));
        }
        Ok(out)
    }

    #[test]
    fn lines_up_to_the_limit_are_read_with_or_without_a_final_newline() {
        let lines = all("abcd\nab\r\n\nxyz", 4).unwrap();
        assert_eq!(
            lines,
            vec![
                (1, "abcd".to_owned()),
                (2, "ab".to_owned()),
                (3, String::new()),
                (4, "xyz".to_owned())
            ]
        );
    }

    #[test]
    fn a_line_past_the_limit_is_refused_with_its_number() {
        for text in ["ok\nabcde\nnext\n", "ok\nabcdefghijklmnop", "ok\nabcde"] {
            match all(text, 4) {
                Err(ReplayError::LineTooLong { line: 2, limit: 4 }) => {}
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    /// A reader that fails the test if more than `budget` bytes are taken
    /// from it: the proof that a long line is not read whole.
    struct Budgeted {
        remaining: usize,
    }

    impl Read for Budgeted {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(64);
            assert!(n <= self.remaining, "read past the budget");
            self.remaining -= n;
            buf[..n].fill(b'x');
            Ok(n)
        }
    }

    #[test]
    fn lines_with_the_prefix_may_run_to_the_longer_limit_and_no_further() {
        let read = |text: &str| {
            let mut lines =
                BoundedLines::new(Cursor::new(text.to_owned()), 4).allow_longer(b"@", 8);
            let mut out = Vec::new();
            while let Some((number, line)) = lines.next_line()? {
                out.push((number, String::from_utf8_lossy(line).into_owned()));
            }
            Ok::<_, ReplayError>(out)
        };
        assert_eq!(
            read("@1234567\nabcd\n@2345678").unwrap(),
            vec![
                (1, "@1234567".to_owned()),
                (2, "abcd".to_owned()),
                (3, "@2345678".to_owned())
            ]
        );
        for (text, line, limit) in [
            ("@12345678\n", 1, 8),
            ("ok\n@123456789abc", 2, 8),
            ("abcde@\n", 1, 4),
            ("x@234567\n", 1, 4),
        ] {
            match read(text) {
                Err(ReplayError::LineTooLong {
                    line: got,
                    limit: at,
                }) => {
                    assert_eq!((got, at), (line, limit), "{text:?}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_endless_line_is_refused_after_reading_only_the_limit() {
        let limit = 10_000;
        // BufReader may read ahead by at most its capacity.
        let capacity = 128;
        let input = std::io::BufReader::with_capacity(
            capacity,
            Budgeted {
                remaining: limit + 1 + capacity,
            },
        );
        let mut lines = BoundedLines::new(input, limit);
        assert!(matches!(
            lines.next_line(),
            Err(ReplayError::LineTooLong { line: 1, .. })
        ));
    }
}
