//! The live limiters: built from the settings, swapped whole on a change (emptied, see
//! the module doc of [`super`]), checked per message.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use governor::clock::{Clock, ReasonablyRealtime};
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use super::config::{LimitsConfig, LimitsError, MAX_RATE, TypeLimit};
use super::metrics::export;
use super::pool::{Leased, Pool, target};

pub(super) type Direct = RateLimiter<NotKeyed, InMemoryState, TokioClock>;

/// The limiters' clock: tokio's. In a running consumer it is the monotonic clock; in
/// a test on tokio's paused clock the limiters' time moves with the test's, so a rate
/// can be proved over virtual minutes in milliseconds, whatever the machine's load.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TokioClock;

impl Clock for TokioClock {
    type Instant = std::time::Instant;

    fn now(&self) -> Self::Instant {
        tokio::time::Instant::now().into_std()
    }
}

impl ReasonablyRealtime for TokioClock {}

/// A limiter for `rate`/s with `burst`, emptied (see the module doc).
fn empty_limiter(rate: f64, burst: u32) -> Arc<Direct> {
    let period = Duration::from_secs_f64(1.0 / rate.clamp(1e-3, MAX_RATE));
    let burst = NonZeroU32::new(burst.max(1)).unwrap_or(NonZeroU32::MIN);
    let quota = Quota::with_period(period.max(Duration::from_nanos(1)))
        .unwrap_or_else(|| Quota::per_second(NonZeroU32::MAX))
        .allow_burst(burst);
    let limiter = RateLimiter::direct_with_clock(quota, TokioClock);
    // Take the initial burst so a swap never adds one.
    let _ = limiter.check_n(burst);
    Arc::new(limiter)
}

/// A type's live state.
#[derive(Debug)]
pub(super) struct TypeState {
    pub(super) limit: TypeLimit,
    pub(super) limiter: Arc<Direct>,
    pub(super) pool: Arc<Pool>,
}

/// What a type check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Go on (then wait for the global limit).
    Pass,
    /// Over the type's rate: park and try later (not a failure).
    Limited,
    /// The type is fused: park until unfused (not a failure).
    Fused,
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) config: LimitsConfig,
    global: Arc<Direct>,
    pub(super) types: BTreeMap<String, TypeState>,
    default_limit: TypeLimit,
    /// Limiters of types met but not listed, created on first use.
    unlisted: std::sync::Mutex<BTreeMap<String, Arc<Direct>>>,
}

/// The live limits, shared by the pipeline and the delay queue's mover.
#[derive(Debug, Clone)]
pub struct Limits {
    pub(super) state: Arc<ArcSwap<State>>,
    pub(super) leased: Arc<Leased>,
}

impl Limits {
    /// Limits with the given settings.
    pub fn new(config: LimitsConfig) -> Self {
        let leased = Arc::new(Leased::default());
        Limits {
            state: Arc::new(ArcSwap::from_pointee(Self::build(config, None, &leased))),
            leased,
        }
    }

    fn build(config: LimitsConfig, old: Option<&State>, leased: &Leased) -> State {
        let global_rate = config.effective_global();
        // An unchanged limiter keeps its state; only a changed one is rebuilt (empty).
        let keep = |old: &TypeState, new: &TypeLimit| {
            old.limit.rate == new.rate && old.limit.burst == new.burst
        };
        let mut types = BTreeMap::new();
        for (name, t) in &config.types {
            let burst = t.burst.unwrap_or(config.default_burst);
            let pool = leased.pool(name);
            let limiter = match old.and_then(|o| o.types.get(name)) {
                Some(o) if keep(o, t) => o.limiter.clone(),
                _ => {
                    // A changed rate: what was leased at the old one goes, beyond
                    // one lease of the new one.
                    pool.trim(target(t.rate, Duration::from_millis(100), false, 1));
                    empty_limiter(t.rate, burst)
                }
            };
            types.insert(
                name.clone(),
                TypeState {
                    limit: t.clone(),
                    limiter,
                    pool,
                },
            );
        }
        let global = match old {
            Some(o)
                if o.config.effective_global() == global_rate
                    && o.config.global_burst == config.global_burst =>
            {
                o.global.clone()
            }
            _ => {
                leased
                    .global
                    .trim(target(global_rate, Duration::from_millis(100), false, 1));
                empty_limiter(global_rate, config.global_burst)
            }
        };
        let default_limit = TypeLimit {
            rate: config.default_rate,
            burst: Some(config.default_burst),
            priority: 0,
            fused: false,
        };
        let unlisted = match old {
            Some(o) if o.default_limit == default_limit => o
                .unlisted
                .lock()
                .map(|m| m.clone())
                .unwrap_or_default()
                .into_iter()
                .filter(|(k, _)| !config.types.contains_key(k))
                .collect(),
            _ => BTreeMap::new(),
        };
        export(&config, global_rate);
        State {
            config,
            global,
            types,
            default_limit,
            unlisted: std::sync::Mutex::new(unlisted),
        }
    }

    /// Applies a new document's `[limits]`; refused (old limits kept) if invalid.
    pub fn apply(&self, doc: &toml::Table) -> Result<(), LimitsError> {
        let config = LimitsConfig::from_document(doc)?;
        let old = self.state.load();
        if old.config == config {
            return Ok(());
        }
        let new = Self::build(config, Some(&old), &self.leased);
        self.state.store(Arc::new(new));
        Ok(())
    }

    /// The settings in effect.
    pub fn config(&self) -> LimitsConfig {
        self.state.load().config.clone()
    }

    /// A type's settings (the defaults for an unlisted type).
    pub fn limit_of(&self, reward_type: &str) -> TypeLimit {
        let s = self.state.load();
        s.types
            .get(reward_type)
            .map(|t| t.limit.clone())
            .unwrap_or_else(|| s.default_limit.clone())
    }

    /// Whether a type is fused now.
    pub fn is_fused(&self, reward_type: &str) -> bool {
        self.state
            .load()
            .types
            .get(reward_type)
            .is_some_and(|t| t.limit.fused)
    }

    /// A type's priority (0 for unlisted types).
    pub fn priority(&self, reward_type: &str) -> u8 {
        self.state
            .load()
            .types
            .get(reward_type)
            .map_or(0, |t| t.limit.priority)
    }

    /// Takes one credit of a type's rate, without waiting: a leased permit (when a
    /// lease task runs) and a credit of the type's local limiter.
    pub fn check(&self, reward_type: &str) -> Verdict {
        let s = self.state.load();
        match s.types.get(reward_type) {
            Some(t) if t.limit.fused => Verdict::Fused,
            Some(t) => self.take(&t.limiter, &t.pool),
            None => {
                let limiter = match s.unlisted.lock() {
                    Ok(mut m) => match m.get(reward_type) {
                        Some(l) => l.clone(),
                        None => m
                            .entry(reward_type.to_string())
                            .or_insert_with(|| {
                                empty_limiter(s.config.default_rate, s.config.default_burst)
                            })
                            .clone(),
                    },
                    Err(_) => return Verdict::Limited,
                };
                self.take(&limiter, &self.leased.pool(reward_type))
            }
        }
    }

    /// One credit of `limiter`, and one leased permit of `pool` while leasing.
    fn take(&self, limiter: &Direct, pool: &Pool) -> Verdict {
        if self.leased.on.load(Ordering::Acquire) {
            if !pool.take() {
                return Verdict::Limited;
            }
            if limiter.check().is_err() {
                pool.put_back();
                return Verdict::Limited;
            }
            return Verdict::Pass;
        }
        if limiter.check().is_ok() {
            Verdict::Pass
        } else {
            Verdict::Limited
        }
    }

    /// Takes one credit of the global rate for a message of `priority`, if one is
    /// free now.
    pub fn try_global(&self, priority: u8) -> bool {
        self.take_global(priority).is_ok()
    }

    /// One global credit, or why not: `None` = no leased permit, `Some(d)` = the
    /// local limiter has one in `d`.
    fn take_global(&self, priority: u8) -> Result<(), Option<Duration>> {
        let s = self.state.load();
        // Global 0 means the sum of the type rates: in a fleet the type buckets hold
        // that sum already, so only an explicit global rate leases a bucket of its own.
        let leased = self.leased.on.load(Ordering::Acquire) && s.config.global > 0.0;
        if leased {
            if let Ok(mut w) = self.leased.waiting.lock() {
                w.insert(priority);
            }
            if !self.leased.global.take() {
                return Err(None);
            }
        }
        match s.global.check() {
            Ok(()) => Ok(()),
            Err(not_until) => {
                if leased {
                    self.leased.global.put_back();
                }
                Err(Some(not_until.wait_time_from(TokioClock.now())))
            }
        }
    }

    /// Waits for one credit of the global rate for a message of `priority`. A change
    /// of the limits while waiting takes effect at the next credit.
    pub async fn global(&self, priority: u8) {
        loop {
            let wait = match self.take_global(priority) {
                Ok(()) => return,
                Err(None) => Duration::from_millis(100),
                Err(Some(d)) => d,
            };
            // Re-read the limits at least every 100 ms; a lease wakes the wait early.
            let refilled = self.leased.refilled.notified();
            tokio::pin!(refilled);
            refilled.as_mut().enable();
            if self.take_global(priority).is_ok() {
                return;
            }
            tokio::select! {
                () = refilled => {}
                () = tokio::time::sleep(wait.min(Duration::from_millis(100))) => {}
            }
        }
    }

    /// Types listed in the settings.
    pub fn listed(&self) -> Vec<String> {
        self.state.load().types.keys().cloned().collect()
    }
}
