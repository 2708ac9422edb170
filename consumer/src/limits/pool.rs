//! The permits an instance leased from the fleet's buckets and has not spent yet, and
//! the lease arithmetic: how many to hold, how large a bucket is.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

/// Permits leased from the fleet's bucket and not yet spent, and whether anything
/// asked for one since the last lease.
#[derive(Debug, Default)]
pub(super) struct Pool {
    pub(super) permits: AtomicI64,
    asked: AtomicBool,
    /// Permits spent since the last lease.
    pub(super) used: AtomicI64,
    /// Thousandths of a permit carried between refills without Redis.
    pub(super) carry_milli: AtomicI64,
    /// Lease periods in a row without a take.
    quiet: std::sync::atomic::AtomicU32,
}

/// Lease periods without a take before a pool counts as idle. A dispatcher waiting on
/// the global valve takes no type permit meanwhile; it is not idle for that.
const QUIET_PERIODS: u32 = 3;

impl Pool {
    /// Whether anything asked for a permit within the last `QUIET_PERIODS` leases.
    pub(super) fn busy(&self) -> bool {
        if self.asked.swap(false, Ordering::AcqRel) {
            self.quiet.store(0, Ordering::Relaxed);
            true
        } else {
            self.quiet.fetch_add(1, Ordering::Relaxed) + 1 < QUIET_PERIODS
        }
    }

    pub(super) fn take(&self) -> bool {
        self.asked.store(true, Ordering::Relaxed);
        let ok = self
            .permits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                (p > 0).then_some(p - 1)
            })
            .is_ok();
        if ok {
            self.used.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    pub(super) fn put_back(&self) {
        self.permits.fetch_add(1, Ordering::AcqRel);
        self.used.fetch_sub(1, Ordering::Relaxed);
    }

    /// Keeps at most `target` permits; answers how many were taken off.
    pub(super) fn trim(&self, target: i64) -> i64 {
        let old = self
            .permits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                Some(p.min(target.max(0)))
            })
            .unwrap_or(0);
        (old - target.max(0)).max(0)
    }

    pub(super) fn add(&self, n: i64, cap: i64) {
        let _ = self
            .permits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                Some((p + n.max(0)).min(cap.max(p)))
            });
    }
}

/// The leased side of the limits, kept across changes of the settings.
#[derive(Debug, Default)]
pub(super) struct Leased {
    /// Whether a lease task runs (checks then need leased permits).
    pub(super) on: AtomicBool,
    /// Per reward type (listed or met).
    pub(super) types: std::sync::Mutex<BTreeMap<String, Arc<Pool>>>,
    pub(super) global: Pool,
    /// Priorities that waited for the global valve since the last lease.
    pub(super) waiting: std::sync::Mutex<BTreeSet<u8>>,
    /// Woken when global permits arrive.
    pub(super) refilled: tokio::sync::Notify,
}

impl Leased {
    pub(super) fn pool(&self, reward_type: &str) -> Arc<Pool> {
        match self.types.lock() {
            // Looked up before inserting: no key is allocated for a type already met.
            Ok(mut m) => match m.get(reward_type) {
                Some(p) => p.clone(),
                None => m.entry(reward_type.to_string()).or_default().clone(),
            },
            // A poisoned map (a panic elsewhere) leases nothing for new types.
            Err(_) => Arc::new(Pool::default()),
        }
    }
}

/// Permits an instance holds for a bucket of `rate`/s: two lease periods of the fleet
/// rate while asked for, one period shared by the live instances while idle.
pub(super) fn target(rate: f64, period: Duration, asked: bool, live: u32) -> i64 {
    let per_period = rate * period.as_secs_f64();
    let t = if asked {
        2.0 * per_period
    } else {
        per_period / f64::from(live.max(1))
    };
    (t.ceil() as i64).max(1)
}

/// The fleet bucket's capacity: the burst, or two lease periods of the rate if larger.
pub(super) fn cap(rate: f64, burst: u32, period: Duration) -> f64 {
    f64::from(burst)
        .max(2.0 * rate * period.as_secs_f64())
        .max(1.0)
}
