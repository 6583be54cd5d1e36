//! The value parsers of the benchmarks' numeric arguments: each argument has
//! a documented range, and anything outside it (zero runs, an infinite, NaN,
//! negative or huge scale, a count no run could finish) is refused by clap
//! with one clear line before anything is measured.

use std::ops::RangeInclusive;

use clap::builder::{RangedU64ValueParser, TypedValueParser};
use thiserror::Error;

/// `--runs`: runs per figure.
pub(super) const RUNS: RangeInclusive<u64> = 1..=1000;
/// `--scale`: the multiplier of the work per run.
pub(super) const SCALE: RangeInclusive<f64> = 0.01..=100.0;
/// `bench list --sessions`.
pub(super) const SESSIONS: RangeInclusive<u64> = 1..=10_000_000;
/// `bench memory --children`.
pub(super) const CHILDREN: RangeInclusive<u64> = 1..=1_000_000;
/// `bench messages --round-trips`.
pub(super) const ROUND_TRIPS: RangeInclusive<u64> = 1..=1_000_000;
/// `bench replay|startup --events`.
pub(super) const EVENTS: RangeInclusive<u64> = 1_000..=100_000_000;
/// `bench console --sessions`: the large tree.
pub(super) const TREE_SESSIONS: RangeInclusive<u64> = 10..=100_000;
/// `bench console --starts`: live starts (the page keeps its newest 1,000
/// timings).
pub(super) const LIVE_STARTS: RangeInclusive<u64> = 1..=100;
/// `bench console --interval-ms`.
pub(super) const INTERVAL_MS: RangeInclusive<u64> = 10..=10_000;

/// A count in `range`, as `usize`.
pub(super) fn count(range: RangeInclusive<u64>) -> impl TypedValueParser<Value = usize> {
    RangedU64ValueParser::<usize>::new().range(range)
}

/// A count in `range`, as `u64`.
pub(super) fn count_u64(range: RangeInclusive<u64>) -> impl TypedValueParser<Value = u64> {
    RangedU64ValueParser::<u64>::new().range(range)
}

/// A bad `--scale`.
#[derive(Debug, Error, PartialEq)]
pub(super) enum ScaleError {
    /// Not a number at all.
    #[error("{0:?} is not a number")]
    NotANumber(String),
    /// Infinite, NaN, or outside [`SCALE`] (as written).
    #[error("{0} is not a finite number in {lo}..={hi}", lo = SCALE.start(), hi = SCALE.end())]
    OutOfRange(String),
}

/// Parses `--scale`: a finite number in [`SCALE`].
///
/// # Errors
/// [`ScaleError`].
pub(super) fn scale(text: &str) -> Result<f64, ScaleError> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| ScaleError::NotANumber(text.to_owned()))?;
    // NaN is in no range, so `contains` refuses it as well as infinities.
    if SCALE.contains(&value) {
        Ok(value)
    } else {
        Err(ScaleError::OutOfRange(text.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_accepts_its_range_and_refuses_the_rest() {
        assert_eq!(scale("1"), Ok(1.0));
        assert_eq!(scale("0.01"), Ok(0.01));
        assert_eq!(scale("100"), Ok(100.0));
        for bad in ["inf", "-inf", "NaN", "-1", "0", "1e300", "100.5", "0.001"] {
            assert_eq!(scale(bad), Err(ScaleError::OutOfRange(bad.into())));
        }
        assert_eq!(scale("lots"), Err(ScaleError::NotANumber("lots".into())));
    }
}
