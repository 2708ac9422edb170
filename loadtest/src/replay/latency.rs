//! Latency percentiles from a histogram.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latency percentiles, in the unit their field names say.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 99th.
    pub p99: u64,
    /// 99.9th.
    pub p999: u64,
    /// Largest.
    pub max: u64,
}

impl Latency {
    pub(super) fn of(h: &Histogram<u64>) -> Self {
        Self {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}
