//! A run's figures: events per second and latency percentiles (nearest rank).

use std::time::Duration;

/// One throughput run.
#[derive(Debug, Clone)]
pub struct Throughput {
    /// Events acknowledged by the broker.
    pub events: u64,
    /// From the first send to the last acknowledgement.
    pub elapsed: Duration,
    /// Per-call latency of the sends (for raw: the enqueue call), microseconds.
    pub calls: Percentiles,
}

impl Throughput {
    /// Acknowledged events per second.
    pub fn rate(&self) -> f64 {
        rate(self.events, self.elapsed)
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest.
    pub max: u64,
}

impl Percentiles {
    /// From unsorted samples (sorted in place).
    pub fn of(samples: &mut [u64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_unstable();
        let at = |q: f64| {
            // Nearest-rank: the smallest sample with at least q of them at or below it.
            let rank = (q * samples.len() as f64).ceil() as usize;
            samples[rank.clamp(1, samples.len()) - 1]
        };
        Self {
            count: samples.len() as u64,
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            max: samples[samples.len() - 1],
        }
    }
}

/// `n` per second over `d` (0 for an empty interval).
pub fn rate(n: u64, d: Duration) -> f64 {
    let secs = d.as_secs_f64();
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

/// `d` in whole microseconds (saturating).
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
