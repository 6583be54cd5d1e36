//! Progress on stderr while a benchmark builds its log or repeats its runs:
//! a bar drawn only when stderr is a terminal (hidden when it is piped or
//! redirected, so a recorded run's stderr keeps only its `…` lines and its
//! errors), redrawn at most 10 times a second, updated only between runs
//! (nothing draws while a run is timed), and cleared once done, so the
//! tables on stdout read as before.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Redraws a second, at most.
const REFRESH_HZ: u8 = 10;

/// A bar named `prefix` over `total` `unit`s (`events`, `runs`), drawn at
/// once if stderr is a terminal. Finish it with `finish_and_clear`; one
/// dropped on an error clears itself.
pub(super) fn bar(prefix: &'static str, total: u64, unit: &str) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr_with_hz(REFRESH_HZ)
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(total), target)
        .with_style(style(unit))
        .with_prefix(prefix);
    bar.force_draw();
    bar
}

/// The bars' template, counting `unit`s.
fn template(unit: &str) -> String {
    format!("{{prefix}} [{{wide_bar}}] {{pos}}/{{len}} {unit} (eta {{eta}})")
}

/// The bars' style, counting `unit`s.
fn style(unit: &str) -> ProgressStyle {
    // The units are words of this crate (a test parses each template), so
    // the fallback to indicatif's default never happens.
    ProgressStyle::with_template(&template(unit)).map_or_else(
        |_| ProgressStyle::default_bar(),
        |style| style.progress_chars("=> "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_templates_parse() {
        for unit in ["events", "runs"] {
            let text = template(unit);
            assert!(ProgressStyle::with_template(&text).is_ok(), "{text}");
        }
    }
}
