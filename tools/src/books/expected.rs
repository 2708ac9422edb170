//! What the books should show: the sent rewards, the budgets, and the rewards a dead
//! sender left ([`Excused`], each with how: [`Marked`]).

use std::collections::{BTreeMap, HashMap};

use super::SentReward;

/// How a dead sender left a reward it had been asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marked {
    /// Answered once its token was stored: it must survive the sender; never excused.
    Stored,
    /// Answered once a broker acknowledged its event, or the sender's spool held it
    /// (synced), before its token write landed: it must be credited, never excused; its
    /// token may have died with the sender (counted with the tokens lost with a host).
    Queued,
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
    /// InDoubt. Stored says more than Queued: the token is kept too.
    pub fn stronger(self, other: Marked) -> Marked {
        let rank = |m: Marked| match m {
            Marked::Stored => 3,
            Marked::Queued => 2,
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
