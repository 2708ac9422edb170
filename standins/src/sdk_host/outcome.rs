//! What a send came to, and the SDK's counters as a host reports them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// What a send came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// The SDK accepted the reward (a token was returned); which store held it when
    /// the call answered (`sdk::HeldBy::label`: `stored`, `queued`, `spooled`, `none`).
    Accepted(&'static str),
    /// The SDK refused it (the kind of refusal).
    Refused(&'static str),
    /// The host died with the call unanswered.
    InDoubt,
}

/// The refusal kinds a host can answer, as the report names them.
pub const KINDS: [&str; 7] = [
    "invalid",
    "backpressure",
    "closed",
    "too_many_tokens",
    "store",
    "seal",
    "in_doubt",
];

/// A refusal's kind as the report names it.
pub fn refusal(e: &sdk::SendError) -> &'static str {
    match e {
        sdk::SendError::Invalid(_) => KINDS[0],
        sdk::SendError::Backpressure(_) => KINDS[1],
        sdk::SendError::Closed => KINDS[2],
        sdk::SendError::TooManyTokens { .. } => KINDS[3],
        sdk::SendError::Store(_) => KINDS[4],
        sdk::SendError::Seal(_) => KINDS[5],
        sdk::SendError::InDoubt(_) => KINDS[6],
    }
}

/// The SDK's counters as a host reports them (every second, and when it closes).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostStats {
    pub accepted: u64,
    pub delivered: u64,
    /// Broker records delivered (a compound record holds many events).
    #[serde(default)]
    pub records: u64,
    pub failovers: u64,
    pub retries: u64,
    pub spooled: u64,
    pub replayed: u64,
    pub logged: u64,
    pub unsettled: u64,
    pub tokens_written: u64,
    pub token_attempts_failed: u64,
    pub token_retries: u64,
    pub tokens_given_up: u64,
    pub tokens_left: u64,
    /// Events a killed host still held (its last count before the kill, at most
    /// a second old): they died with it.
    #[serde(default)]
    pub died_in_memory: u64,
}

impl HostStats {
    /// An SDK's counters now (`queue` from `stats()` or a close report).
    pub fn of(sdk: &sdk::Sdk, queue: &sdk::queue::StatsSnapshot, tokens_left: u64) -> Self {
        let st = sdk.store().stats();
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Self {
            accepted: queue.accepted,
            delivered: queue.delivered,
            records: queue.records,
            failovers: queue.failovers,
            retries: queue.retries,
            spooled: queue.spooled,
            replayed: queue.replayed,
            logged: queue.logged,
            unsettled: queue.unsettled,
            tokens_written: n(&st.written),
            token_attempts_failed: n(&st.failed),
            token_retries: n(&st.retried),
            tokens_given_up: n(&st.unstored),
            tokens_left,
            died_in_memory: 0,
        }
    }

    pub fn add(&mut self, o: &Self) {
        self.accepted += o.accepted;
        self.delivered += o.delivered;
        self.records += o.records;
        self.failovers += o.failovers;
        self.retries += o.retries;
        self.spooled += o.spooled;
        self.replayed += o.replayed;
        self.logged += o.logged;
        self.unsettled += o.unsettled;
        self.tokens_written += o.tokens_written;
        self.token_attempts_failed += o.token_attempts_failed;
        self.token_retries += o.token_retries;
        self.tokens_given_up += o.tokens_given_up;
        self.tokens_left += o.tokens_left;
        self.died_in_memory += o.died_in_memory;
    }

    /// The queue's part, as the per-second sampler keeps it.
    pub fn snapshot(&self) -> sdk::queue::StatsSnapshot {
        sdk::queue::StatsSnapshot {
            accepted: self.accepted,
            delivered: self.delivered,
            records: self.records,
            failovers: self.failovers,
            retries: self.retries,
            spooled: self.spooled,
            replayed: self.replayed,
            logged: self.logged,
            unsettled: self.unsettled,
            per_producer: BTreeMap::new(),
        }
    }

    /// Named as the report's SDK table shows them.
    pub fn counters(&self) -> BTreeMap<String, u64> {
        [
            ("events accepted", self.accepted),
            ("events delivered", self.delivered),
            ("broker records delivered", self.records),
            ("events failed over", self.failovers),
            ("event send retries", self.retries),
            ("events spooled", self.spooled),
            ("events replayed from spool", self.replayed),
            ("events only logged", self.logged),
            ("events unsettled at close", self.unsettled),
            ("tokens written", self.tokens_written),
            ("token write attempts failed", self.token_attempts_failed),
            ("token write retries", self.token_retries),
            ("tokens given up", self.tokens_given_up),
            ("tokens left at close", self.tokens_left),
            ("events in memory of a killed SDK host", self.died_in_memory),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}
