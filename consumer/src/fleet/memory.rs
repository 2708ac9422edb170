//! An in-memory fleet for tests: the lease script's arithmetic (`lease.lua`) on
//! tokio's clock, shared by any number of instances in one process, and a switch that
//! cuts them all off as a blackholed Redis would: a lease then never answers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use super::store::{LeaseError, LeaseStore};
use crate::limits::{Ask, Grant, Plan};

/// One token bucket: tokens, and when they were last refilled.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The fleet's state, as Redis would hold it.
#[derive(Debug, Default)]
struct Fleet {
    live: BTreeMap<String, Instant>,
    types: BTreeMap<String, Bucket>,
    global: Option<Bucket>,
    /// Per instance: (its highest waiting priority, its demand, when it expires).
    demand: BTreeMap<String, (u8, f64, Instant)>,
}

/// The shared fleet; [`MemoryFleet::instance`] hands out one store per instance.
#[derive(Debug, Clone, Default)]
pub(crate) struct MemoryFleet {
    state: Arc<Mutex<Fleet>>,
    cut: Arc<AtomicBool>,
}

/// One instance's view of a [`MemoryFleet`].
#[derive(Debug, Clone)]
pub(crate) struct MemoryLeases {
    fleet: MemoryFleet,
    instance: String,
    live_ttl: std::time::Duration,
    lease: std::time::Duration,
}

impl MemoryFleet {
    /// A store for instance `name`, with the fleet's live TTL and lease period.
    pub(crate) fn instance(
        &self,
        name: &str,
        live_ttl: std::time::Duration,
        lease: std::time::Duration,
    ) -> MemoryLeases {
        MemoryLeases {
            fleet: self.clone(),
            instance: name.to_string(),
            live_ttl,
            lease,
        }
    }

    /// Cuts every instance off (each lease hangs, unanswered, until the caller's
    /// timeout) or reconnects them.
    pub(crate) fn cut_off(&self, cut: bool) {
        self.cut.store(cut, Ordering::Release);
    }
}

/// Refills `b` at `rate`/s up to now, adds what is given back, caps it.
fn refill(b: Option<Bucket>, now: Instant, a: &Ask) -> Bucket {
    let mut b = b.unwrap_or(Bucket {
        tokens: 0.0,
        at: now,
    });
    if now > b.at {
        b.tokens += now.duration_since(b.at).as_secs_f64() * a.rate;
        b.at = now;
    }
    b.tokens = (b.tokens + a.give as f64).min(a.cap);
    b
}

impl LeaseStore for MemoryLeases {
    async fn lease(&self, plan: &Plan) -> Result<Grant, LeaseError> {
        if self.fleet.cut.load(Ordering::Acquire) {
            std::future::pending::<()>().await;
        }
        let now = Instant::now();
        let mut f = self
            .fleet
            .state
            .lock()
            .map_err(|_| LeaseError::Unreadable)?;
        f.live.insert(self.instance.clone(), now);
        let ttl = self.live_ttl;
        f.live.retain(|_, at| now.duration_since(*at) <= ttl);
        let live = u32::try_from(f.live.len()).unwrap_or(u32::MAX);
        let mut types = Vec::new();
        for a in &plan.types {
            let mut b = refill(f.types.get(&a.name).copied(), now, a);
            let grant = (a.want as f64).min(b.tokens).floor().max(0.0);
            b.tokens -= grant;
            f.types.insert(a.name.clone(), b);
            types.push(grant as i64);
        }
        let mut g = refill(f.global, now, &plan.global);
        f.demand
            .retain(|who, (_, _, exp)| *exp >= now && *who != self.instance);
        let want = plan.global.want as f64;
        let mut granted = 0.0;
        for &prio in &plan.classes {
            let reserve: f64 = f
                .demand
                .values()
                .filter(|(p, _, _)| *p > prio)
                .map(|(_, w, _)| w)
                .sum();
            let n = (want - granted).min(g.tokens - reserve).floor().max(0.0);
            g.tokens -= n;
            granted += n;
        }
        f.global = Some(g);
        if let Some(&top) = plan.classes.first() {
            let demand = want.min(2.0 * plan.global_used as f64 + 1.0);
            f.demand
                .insert(self.instance.clone(), (top, demand, now + 3 * self.lease));
        }
        Ok(Grant {
            live,
            types,
            global: granted as i64,
        })
    }

    async fn leave(&self) {
        if let Ok(mut f) = self.fleet.state.lock() {
            f.live.remove(&self.instance);
        }
    }
}
