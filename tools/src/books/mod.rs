//! The books: proof from Redis that every reward sent was credited exactly once, within
//! budget, with its token where the user's wallet looks for it.
//!
//! The expected side is a sent list ([`read_sent`]: one line per `send_reward` that
//! the SDK accepted); the stored side is read directly from the ledger (the service's
//! built-in downstream), the claim store's budget shards and the token hashes, never
//! from any service's own counters. A load-test replay checks its run with it
//! (`loadtest reconcile DIR`); an operator checks an activity's books after an event
//! with `reward-ctl books`.
//!
//! | check | passes when |
//! | --- | --- |
//! | credited once | every distinct sent trade number is in its user's ledger |
//! | nothing extra | the ledger holds no trade number that was not sent (for the users sent to) |
//! | amounts | each user's balance per type equals the sum of their sent amounts |
//! | no double credit | the ledger's double-credit counters are all zero |
//! | budget | spent per scene equals the credits of that scene, and is within budget |
//! | tokens | every sent trade's token is in the user's pending or credited hash (or its write failure was counted), credited ones moved to the credited hash, no token for a trade not sent |
//! | lost with a killed host | (only with [`Expected::excused`]) no more excused rewards died unstored than the bound allows |
//!
//! A repeated send must carry the same type, amount and user as the first; a mismatch
//! is reported as a conflict.
//!
//! Marked rewards ([`Excused`]) are those a dead sender answered (or held
//! unanswered) when it died, each with how ([`Marked`]). One whose token is in the
//! store is held to every check above. One with no token and no credit is excused,
//! counted as **lost with the host** and left out of the expected balances, only if
//! the sender never said its token was stored: a call in doubt (unanswered when the
//! sender died: the user saw an error) or, with deferred token writes, a call answered
//! before its write landed. A reward whose answer came after its token was stored
//! ([`Marked::Stored`], the SDK's default direct writes) is never excused: missing is
//! missing. The row fails when more were lost than the bound.
//!
//! # Where each part lives
//! `sent` (the sent list), `read` (connecting and reading the stores, the tally),
//! `checks` (the rows), here the entry point [`check`].

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

mod checks;
mod read;
mod sent;
#[cfg(test)]
mod tests;

pub use self::sent::{SentReward, read_sent};

/// Where the books live: one Redis and the prefixes the services were configured with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stores {
    /// The Redis holding tokens, claim records and budgets.
    pub redis_url: String,
    /// The Redis of the ledger (the stand-in wallet's own, or `redis_url`).
    pub ledger_redis_url: String,
    /// The token store's key prefix (`[sdk.store] key_prefix`).
    pub token_prefix: String,
    /// The claim store's key prefix (`[claims] key_prefix`).
    pub claims_prefix: String,
    /// The claim store's shards per scene (`[claims] shards`).
    pub claims_shards: u32,
    /// The ledger's key prefix (the built-in downstream's).
    pub ledger_prefix: String,
}

/// How a dead sender left a reward it had been asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marked {
    /// Answered once its token was stored: it must survive the sender; never excused.
    Stored,
    /// Answered before its token write landed (deferred writes): may have died with
    /// the sender; excused within the bound.
    Answered,
    /// Unanswered when the sender died (the caller saw an error): may or may not have
    /// been stored; excused within the bound.
    InDoubt,
}

impl Marked {
    /// The mark that says more of two marks of one trade number (a repeat left in
    /// doubt never weakens a send answered as stored): Stored, then Answered, then
    /// InDoubt.
    pub fn stronger(self, other: Marked) -> Marked {
        let rank = |m: Marked| match m {
            Marked::Stored => 2,
            Marked::Answered => 1,
            Marked::InDoubt => 0,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

/// Rewards a dead sender answered or held unanswered when it died.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Excused {
    /// Trade number -> how the sender left it.
    pub rewards: HashMap<String, Marked>,
    /// At most this many of them can have died before their token write.
    pub bound: u64,
}

/// What the books should show.
#[derive(Debug, Clone, Default)]
pub struct Expected {
    /// Every distinct trade number sent, its first send ([`read_sent`]).
    pub sent: BTreeMap<String, SentReward>,
    /// Repeated sends of a trade number.
    pub repeats: u64,
    /// Repeats that named another type, amount or user.
    pub conflicts: u64,
    /// `activity/scene` -> its budget, smallest unit.
    pub budgets: BTreeMap<String, i64>,
    /// Token writes the SDK counted as failed (so many sent rewards may lack a token).
    pub token_write_failures: u64,
    /// Rewards of dead senders, if any died.
    pub excused: Option<Excused>,
}

/// One row of the PASS/FAIL table.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it held.
    pub pass: bool,
    /// Counts behind the verdict.
    pub detail: String,
}

/// The outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Reconciliation {
    /// The table.
    pub checks: Vec<Check>,
    /// Distinct trade numbers sent.
    pub sent: u64,
    /// Repeated sends of a trade number.
    pub repeats: u64,
    /// Distinct trade numbers credited.
    pub credited: u64,
    /// Sum of sent amounts.
    pub sent_amount: i64,
    /// Sent trade numbers whose token is in neither the pending nor the credited hash.
    pub tokens_missing: u64,
    /// Rewards a killed SDK host answered before their token write (deferred writes)
    /// or held unanswered, whose token never reached the store and which nothing
    /// credited: they died with the host (`lost_answered + lost_unanswered`).
    pub lost_with_host: u64,
    /// Of them, calls the host had answered (the user was shown the reward): only
    /// with deferred (or batched, after a failed first attempt) token writes; 0 with
    /// direct ones.
    pub lost_answered: u64,
    /// Of them, calls still unanswered when the host died (the user saw an error).
    pub lost_unanswered: u64,
    /// Rewards marked by a killed SDK host (accepted or in doubt), credited or not.
    pub host_marked: u64,
    /// Send time (Unix ms) of each of them (for the timeline).
    #[serde(skip)]
    pub tokens_missing_sent_ms: Vec<i64>,
    /// Credit time minus send time of every credited trade, ms (for latency figures).
    #[serde(skip)]
    pub credit_delays_ms: Vec<(i64, i64, String)>,
}

impl Reconciliation {
    /// Every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }

    /// The table as text.
    pub fn table(&self) -> String {
        let mut s = format!("{:<18} {:<6} detail\n", "check", "result");
        for c in &self.checks {
            s.push_str(&format!(
                "{:<18} {:<6} {}\n",
                c.name,
                if c.pass { "PASS" } else { "FAIL" },
                c.detail
            ));
        }
        s
    }
}

/// Reads the stores `at` names and checks them against `expected`. Store errors
/// name the store (see [`unanswered`]).
pub async fn check(at: &Stores, expected: &Expected) -> anyhow::Result<Reconciliation> {
    let no_marks = HashMap::new();
    let marks = expected.excused.as_ref().map_or(&no_marks, |e| &e.rewards);
    let (ledger, claims, tokens) = read::connect(at).await?;
    let t = read::tally(&expected.sent, marks, &ledger, &tokens).await?;
    let n = expected.sent.len() as u64;
    let mut checks = checks::ledger_checks(&t, n, expected.repeats, expected.conflicts);
    checks.push(checks::budget_check(&expected.budgets, &claims, &t.credited_by_scope).await?);
    checks.push(checks::tokens_check(&t, expected.token_write_failures));
    if let Some(ex) = expected.excused.as_ref().filter(|e| !e.rewards.is_empty()) {
        checks.push(Check {
            name: "lost with a killed host".into(),
            pass: t.lost_with_host + t.token_lost_with_host <= ex.bound,
            detail: format!(
                "{} of {} rewards left in doubt (by a killed SDK host, or refused after a token write's answer was lost) neither stored nor credited ({} answered before their token write, {} unanswered), {} credited without their token; at most {} token writes were unfinished in them",
                t.lost_with_host,
                ex.rewards.len(),
                t.lost_answered,
                t.lost_with_host - t.lost_answered,
                t.token_lost_with_host,
                ex.bound
            ),
        });
    }
    Ok(Reconciliation {
        checks,
        sent: n,
        repeats: expected.repeats,
        credited: t.credited,
        sent_amount: expected.sent.values().map(|r| r.amount).sum(),
        tokens_missing: t.token_missing,
        lost_with_host: t.lost_with_host,
        lost_answered: t.lost_answered,
        lost_unanswered: t.lost_with_host - t.lost_answered,
        host_marked: marks.len() as u64,
        credit_delays_ms: t.delays,
        tokens_missing_sent_ms: t.token_missing_sent_ms,
    })
}

/// Whether [`check`] failed because a store did not answer (its errors name the
/// store), so that asking again may succeed; a check that fails is an answer, not an
/// error.
pub fn unanswered(e: &anyhow::Error) -> bool {
    let text = format!("{e:#}");
    ["token store:", "ledger:", "claim store:"]
        .iter()
        .any(|p| text.starts_with(p))
}
