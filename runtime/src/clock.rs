//! Wall-clock time as the pipeline stores it: Unix milliseconds in an `i64`.
//!
//! Tokens, claim records, delay-queue scores and dead letters all carry times in this
//! one unit, so they compare across processes and machines (to within their clocks'
//! skew). Durations inside one process use `std::time::Instant` instead.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in Unix milliseconds: 0 when the clock reads before 1970, `i64::MAX` past the
/// year 292 million. Never panics.
///
/// ```
/// let t = reward_runtime::clock::now_ms();
/// assert!(t > 1_700_000_000_000);
/// ```
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
