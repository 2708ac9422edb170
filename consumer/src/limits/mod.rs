//! Rate limits: one global valve, one per reward type, each changeable while running.
//!
//! # The settings
//! They live in the `[limits]` section of the shared dynamic document
//! (`docs/dynamic-config.md`), so `ops/config set limits.types.coupon.rate 500`
//! reaches every consumer within one poll period (500 ms by default):
//!
//! ```toml
//! [limits]
//! global = 0             # credits/s over all types; 0 = the sum of the type rates
//! global_burst = 200
//! default_rate = 1000    # types not listed below
//! default_burst = 50
//! [limits.types.cash]
//! rate = 300000
//! burst = 3000
//! priority = 10          # higher first when the global rate binds
//! [limits.types.coupon]
//! rate = 2000
//! fused = false          # true: credit none of this type until unfused
//! ```
//!
//! # Why a swap and an empty bucket
//! `governor` fixes a limiter's quota at construction, so a change builds a new
//! limiter and swaps it in with `arc-swap` (readers never wait). A fresh GCRA limiter
//! starts with a full bucket: swapped in as is, every change would let one more burst
//! through, and a script that changed the rate ten times a second would multiply the
//! rate. So a new limiter is emptied (its whole burst taken) before it goes in: the
//! old limiter's unspent burst is simply lost, and at any instant at most one burst is
//! available, whichever limiter holds it.
//!
//! # Per type, never blocking
//! A type's check is non-blocking: a message over its type's rate, or of a fused type,
//! is parked in the delay queue at once (`crate::delay`) and never holds a worker, so a
//! slow coupon never delays cash. Only the global limit waits, and it serves waiting
//! messages by priority (`crate::pipeline`).
//!
//! # For the whole fleet
//! A running consumer leases its permits from Redis ([`crate::fleet`]): a check then
//! takes one leased permit *and* one credit of the type's `governor` limiter, which
//! runs at the fleet rate and smooths each lease over its period. [`Limits::new`]
//! alone (no lease task) limits one process, as the unit tests here use it. A change
//! of a type's rate or burst also drops the leased permits beyond the new lease, so a
//! lowered rate is in effect at the next check, not after the old lease is spent.
//!
//! # Where each part lives
//! - [`config`]: the `[limits]` settings, their checks and the effective global rate;
//! - `live`: the live limiters (built, swapped on a change, checked);
//! - `pool`: the permits leased from the fleet's buckets, and the lease arithmetic;
//! - [`plan`]: what a lease asks for and what it granted (what [`crate::fleet`] sends
//!   to Redis);
//! - `lease`: how the live limits fill a plan and take in a grant;
//! - `metrics`: the limits in effect as gauges.

pub mod config;
mod lease;
mod live;
mod metrics;
pub mod plan;
mod pool;
#[cfg(test)]
mod tests;

pub use self::config::{LimitsConfig, LimitsError, TypeLimit};
pub use self::live::{Limits, Verdict};
pub use self::plan::{Ask, Grant, Plan};
