//! The ceiling a rate limit promises on any machine, for tests that read credit
//! times back from the ledger.

/// Seconds of the rate the ledger may stamp late into a window: it stamps each credit
/// after the gRPC hop, so a stall of the service bunches credits the limiter admitted
/// just before the window into it.
pub const STAMP_SLACK_SECS: f64 = 2.0;

/// The most credits a limit of `rate` per second may stamp in a window of `secs`
/// seconds: the rate over the window and [`STAMP_SLACK_SECS`], plus `held`, what
/// the limiters' buckets and leased pools can hold at the window's start. Reaching
/// the rate depends on the machine; this bound does not.
///
/// ```
/// // 50/s over 4 s, with 20 credits held: 50 x (4 + 2) + 20.
/// assert_eq!(reward_testkit::rates::ceiling(50.0, 4.0, 20.0), 320.0);
/// ```
pub fn ceiling(rate: f64, secs: f64, held: f64) -> f64 {
    rate * (secs + STAMP_SLACK_SECS) + held
}
