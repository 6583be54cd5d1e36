//! Progress bars for the long commands (`verify`, `replay`, `export`,
//! `import`). This module owns when a bar is drawn and how it looks:
//!
//! - drawn on stderr only when stderr is a terminal (and `TERM` is set and
//!   not `dumb`); hidden when stderr is piped or redirected, so scripts and
//!   logs get exactly what they got before;
//! - never on stdout, and cleared once the command is done or has failed,
//!   so only the command's own output stays on the screen;
//! - redrawn at most [`REFRESH_HZ`] times a second, and told of a pass's
//!   records only every [`RECORD_STEP`] of them, so a large log pays
//!   nothing noticeable for it;
//! - drawn at once when a pass starts, so even a short one shows it (and a
//!   test on a pseudo-terminal sees it).

use std::io::{IsTerminal, Read};

use indicatif::{ProgressBar, ProgressBarIter, ProgressDrawTarget, ProgressStyle};

/// Redraws a second, at most.
const REFRESH_HZ: u8 = 10;

/// Records between two updates of a record bar (an update reads the clock;
/// the draw target's rate limit then decides whether to redraw).
const RECORD_STEP: u64 = 256;

/// A pass over a log's records. (`per_sec`'s width is its precision: a
/// whole number of events a second.)
const RECORDS: &str = "{prefix} [{wide_bar}] {pos}/{len} events ({per_sec:0}, eta {eta})";

/// Reading a file of known length.
const BYTES: &str = "{prefix} [{wide_bar}] {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})";

/// Reading input of unknown length (a pipe, a device).
const SPINNER: &str = "{prefix} {spinner} {bytes} ({bytes_per_sec})";

/// One command's progress bar on stderr.
pub(crate) struct Bar(ProgressBar);

impl Bar {
    /// A bar over a pass of a log's records, named `prefix` (the command);
    /// its total comes from the pass ([`subagent_replay::Progress`]).
    pub(crate) fn records(prefix: &'static str) -> Bar {
        Bar::drawn(Some(0), RECORDS, prefix)
    }

    /// A bar over reading `length` bytes, or a spinner when the length is
    /// unknown; [`Bar::wrap_read`] counts the bytes.
    pub(crate) fn bytes(prefix: &'static str, length: Option<u64>) -> Bar {
        let template = if length.is_some() { BYTES } else { SPINNER };
        Bar::drawn(length, template, prefix)
    }

    /// A bar drawing to stderr if it is a terminal, hidden otherwise.
    fn drawn(length: Option<u64>, template: &str, prefix: &'static str) -> Bar {
        let target = if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr_with_hz(REFRESH_HZ)
        } else {
            ProgressDrawTarget::hidden()
        };
        Bar(ProgressBar::with_draw_target(length, target)
            .with_style(style(template))
            .with_prefix(prefix))
    }

    /// Never draws when `hide` (e.g. `export` writing its records to the
    /// same terminal, where a bar would break into them).
    pub(crate) fn hidden_if(self, hide: bool) -> Bar {
        if hide {
            self.0.set_draw_target(ProgressDrawTarget::hidden());
        }
        self
    }

    /// `input`, counting what is read (consumed) from it on the bar, which
    /// is drawn now.
    pub(crate) fn wrap_read<R: Read>(&self, input: R) -> ProgressBarIter<R> {
        self.0.force_draw();
        self.0.wrap_read(input)
    }

    /// Clears the bar: the work is done. (A bar dropped unfinished, on an
    /// error, is cleared too.)
    pub(crate) fn finish(&self) {
        self.0.finish_and_clear();
    }
}

impl subagent_replay::Progress for Bar {
    fn set_total(&self, total: u64) {
        self.0.set_length(total);
        self.0.force_draw();
    }

    fn reached(&self, done: u64) {
        if done.is_multiple_of(RECORD_STEP) {
            self.0.set_position(done);
        }
    }
}

/// The style of `template`. The templates are constants (a test parses
/// each), so the fallback to indicatif's default never happens.
fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).map_or_else(
        |_| ProgressStyle::default_bar(),
        |style| style.progress_chars("=> "),
    )
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};

    use subagent_replay::Progress;

    use super::*;

    #[test]
    fn every_template_parses() {
        for template in [RECORDS, BYTES, SPINNER] {
            assert!(ProgressStyle::with_template(template).is_ok(), "{template}");
        }
    }

    #[test]
    fn a_hidden_bar_still_counts() {
        let bar = Bar::records("verify").hidden_if(true);
        assert!(bar.0.is_hidden());
        bar.set_total(1000);
        assert_eq!(bar.0.length(), Some(1000));
        for done in 1..=600 {
            bar.reached(done);
        }
        assert_eq!(bar.0.position(), 2 * RECORD_STEP, "updated every step");
        bar.finish();
        assert!(bar.0.is_finished());
    }

    #[test]
    fn a_wrapped_reader_counts_the_bytes_consumed() {
        let bar = Bar::bytes("import", Some(12)).hidden_if(true);
        let mut input = BufReader::new(bar.wrap_read(&b"one\ntwo\nend\n"[..]));
        let mut line = String::new();
        input.read_line(&mut line).unwrap();
        assert_eq!(line, "one\n");
        // The buffered reader took everything at once.
        assert_eq!(bar.0.position(), 12);

        let bar = Bar::bytes("import", None).hidden_if(true);
        let mut input = bar.wrap_read(BufReader::new(&b"one\ntwo\n"[..]));
        let mut line = String::new();
        input.read_line(&mut line).unwrap();
        assert_eq!(bar.0.position(), 4, "what was consumed, not buffered");
        assert_eq!(bar.0.length(), None);
    }
}
