//! How the live limits take part in a fleet lease ([`crate::fleet`]): the plan of what
//! to give back and ask for, the grant taken in, the refill without Redis, the release
//! when leaving.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::live::Limits;
use super::plan::{Ask, Grant, Plan};
use super::pool::{Pool, cap, target};

impl Limits {
    /// From now on a check needs a leased permit ([`crate::fleet::run`] calls it).
    pub(crate) fn lease_on(&self) {
        self.leased.on.store(true, Ordering::Release);
    }

    /// Whether checks need leased permits.
    pub fn leasing(&self) -> bool {
        self.leased.on.load(Ordering::Acquire)
    }

    /// What the next lease gives back and asks for, with `live` instances leasing every
    /// `period`. With `give_back`, permits beyond each bucket's need leave the pools
    /// here. Without it (the last lease failed: the instance refills itself, and
    /// what it gave back would most likely vanish with an unanswered lease) the pools
    /// keep them, bounded by the refill's cap ([`Limits::lease_fallback`]).
    pub(crate) fn lease_plan(&self, period: Duration, live: u32, give_back: bool) -> Plan {
        let s = self.state.load();
        let mut types = Vec::new();
        let mut ask = |name: &str, rate: f64, burst: u32, fused: bool| {
            let pool = self.leased.pool(name);
            let asked = pool.busy();
            pool.used.store(0, Ordering::Relaxed);
            let tgt = if fused {
                0
            } else {
                target(rate, period, asked, live)
            };
            let give = if give_back { pool.trim(tgt) } else { 0 };
            let have = pool.permits.load(Ordering::Acquire);
            types.push(Ask {
                name: name.to_string(),
                rate,
                cap: cap(rate, burst, period),
                give,
                want: (tgt - have).max(0),
            });
        };
        for (name, t) in &s.types {
            ask(
                name,
                t.limit.rate,
                t.limit.burst.unwrap_or(s.config.default_burst),
                t.limit.fused,
            );
        }
        let met: Vec<String> = match self.leased.types.lock() {
            Ok(m) => m
                .keys()
                .filter(|k| !s.types.contains_key(*k))
                .cloned()
                .collect(),
            Err(_) => Vec::new(),
        };
        for name in met {
            ask(&name, s.config.default_rate, s.config.default_burst, false);
        }
        let g = &self.leased.global;
        let rate = s.config.effective_global();
        let asked = g.busy();
        // Without an explicit global rate the type buckets already hold the sum.
        let tgt = if s.config.global > 0.0 {
            target(rate, period, asked, live)
        } else {
            0
        };
        let give = if give_back { g.trim(tgt) } else { 0 };
        let have = g.permits.load(Ordering::Acquire);
        let mut classes: Vec<u8> = match self.leased.waiting.lock() {
            Ok(mut w) => std::mem::take(&mut *w).into_iter().collect(),
            Err(_) => Vec::new(),
        };
        classes.reverse();
        Plan {
            types,
            global: Ask {
                name: String::new(),
                rate,
                cap: cap(rate, s.config.global_burst, period),
                give,
                want: (tgt - have).max(0),
            },
            global_used: g.used.swap(0, Ordering::AcqRel),
            classes,
        }
    }

    /// Adds what a lease granted.
    pub(crate) fn lease_granted(&self, plan: &Plan, grant: &Grant) {
        for (ask, n) in plan.types.iter().zip(&grant.types) {
            self.leased.pool(&ask.name).add(*n, i64::MAX);
        }
        self.leased.global.add(grant.global, i64::MAX);
        self.leased.refilled.notify_waiters();
    }

    /// Refills without Redis: each bucket at `rate / live` for `elapsed`, up to what
    /// the plan wanted.
    pub(crate) fn lease_fallback(&self, plan: &Plan, elapsed: Duration, live: u32) {
        let share = |a: &Ask, pool: &Pool| {
            let milli = (a.rate / f64::from(live.max(1)) * elapsed.as_secs_f64() * 1000.0) as i64
                + pool.carry_milli.load(Ordering::Relaxed);
            pool.carry_milli.store(milli % 1000, Ordering::Relaxed);
            // The share for the time that really passed. The plan's `want` was reckoned
            // for one lease period at its start, while a failed lease cycle lasts its
            // timeout: capping the share at it would starve the fleet. The pool holds
            // at most this share plus that want, so an instance never hoards more than
            // a cycle's worth.
            let n = milli / 1000;
            if a.want > 0 || n > 0 {
                pool.add(n, n + a.want.max(0));
            }
        };
        for a in &plan.types {
            share(a, &self.leased.pool(&a.name));
        }
        share(&plan.global, &self.leased.global);
        self.leased.refilled.notify_waiters();
    }

    /// A plan that gives every held permit back and asks for none (leaving the fleet).
    pub(crate) fn lease_release(&self) -> Plan {
        let mut plan = self.lease_plan(Duration::from_millis(100), 1, true);
        for a in &mut plan.types {
            a.give += self.leased.pool(&a.name).trim(0);
            a.want = 0;
        }
        plan.global.give += self.leased.global.trim(0);
        plan.global.want = 0;
        plan.classes.clear();
        plan
    }
}
