//! Summaries of repeated measurements: median, min and max.

use std::fmt;

/// The median, min and max of a set of runs.
#[derive(Clone, Copy, Debug)]
pub(super) struct Summary {
    /// Median of the runs.
    pub median: f64,
    /// Smallest run.
    pub min: f64,
    /// Largest run.
    pub max: f64,
}

impl Summary {
    /// Summarizes `samples` (at least one).
    #[must_use]
    pub(super) fn of(samples: &[f64]) -> Summary {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let middle = sorted.len() / 2;
        let median = if sorted.is_empty() {
            0.0
        } else if sorted.len() % 2 == 1 {
            sorted[middle]
        } else {
            (sorted[middle - 1] + sorted[middle]) / 2.0
        };
        Summary {
            median,
            min: sorted.first().copied().unwrap_or(0.0),
            max: sorted.last().copied().unwrap_or(0.0),
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>9.0} ({:.0}–{:.0})", self.median, self.min, self.max)
    }
}

/// The `fraction` percentile (0.5 = p50) of sorted latencies, in milliseconds.
#[must_use]
pub(super) fn percentile_ms(sorted: &[std::time::Duration], fraction: f64) -> f64 {
    let Some(last) = sorted.len().checked_sub(1) else {
        return 0.0;
    };
    let index = (last as f64 * fraction).round() as usize;
    sorted
        .get(index)
        .map_or(0.0, |latency| latency.as_secs_f64() * 1000.0)
}

/// Awaits every task's latencies and joins them, in task order.
///
/// # Errors
/// The first task that panicked or failed.
pub(super) async fn join_latencies<E: std::error::Error + 'static>(
    tasks: Vec<tokio::task::JoinHandle<Result<Vec<std::time::Duration>, E>>>,
) -> Result<Vec<std::time::Duration>, Box<dyn std::error::Error>> {
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    Ok(latencies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let odd = Summary::of(&[5.0, 1.0, 3.0]);
        assert_eq!((odd.median, odd.min, odd.max), (3.0, 1.0, 5.0));
        let even = Summary::of(&[4.0, 1.0, 2.0, 3.0]);
        assert_eq!(even.median, 2.5);
    }

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let latencies: Vec<_> = (1..=100).map(std::time::Duration::from_millis).collect();
        assert_eq!(percentile_ms(&latencies, 0.5), 51.0);
        assert_eq!(percentile_ms(&latencies, 0.99), 99.0);
        assert_eq!(percentile_ms(&[], 0.5), 0.0);
    }
}
