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

/// The CPU time this process has used so far, every thread's user and
/// system time, from `/proc/self/stat` (Linux; its ticks are `USER_HZ`,
/// 100 per second on every architecture the kernel exposes to /proc).
///
/// # Errors
/// When `/proc/self/stat` cannot be read or parsed.
pub(super) fn process_cpu_seconds() -> Result<f64, Box<dyn std::error::Error>> {
    const USER_HZ: f64 = 100.0;
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // The command name, in parentheses, may hold spaces: count after it.
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or("/proc/self/stat has no command name")?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of proc(5) (utime, stime) are the 12th and 13th
    // after the name.
    let ticks = |index: usize| -> Result<f64, Box<dyn std::error::Error>> {
        Ok(fields
            .get(index)
            .ok_or("/proc/self/stat is too short")?
            .parse::<u64>()? as f64)
    };
    Ok((ticks(11)? + ticks(12)?) / USER_HZ)
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
    fn process_cpu_time_counts_work_done() {
        // Busy until the count shows 50 ms of CPU: a count that never
        // grows fails at the deadline, whatever else the machine runs.
        let before = process_cpu_seconds().unwrap();
        let began = std::time::Instant::now();
        let mut spin = 0u64;
        let used = loop {
            for _ in 0..100_000 {
                spin = std::hint::black_box(spin.wrapping_add(1));
            }
            let used = process_cpu_seconds().unwrap() - before;
            if used >= 0.05 {
                break used;
            }
            assert!(
                began.elapsed() < std::time::Duration::from_secs(30),
                "{used} s of CPU counted after 30 s busy"
            );
        };
        // Nor does it count more than the process's threads could use
        // in the time it took (the count's tick is 10 ms).
        let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        let most = began.elapsed().as_secs_f64() * cores + 0.02;
        assert!(
            used <= most,
            "{used} s of CPU counted in {most} s of capacity"
        );
    }

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let latencies: Vec<_> = (1..=100).map(std::time::Duration::from_millis).collect();
        assert_eq!(percentile_ms(&latencies, 0.5), 51.0);
        assert_eq!(percentile_ms(&latencies, 0.99), 99.0);
        assert_eq!(percentile_ms(&[], 0.5), 0.0);
    }
}
