//! What the store answers: what a claim found ([`Claim`]), what an earlier owner left
//! behind ([`Prior`]), and what a finish did ([`Finish`]).

/// What an earlier owner of a claimed record left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prior {
    /// A new record: nothing was ever sent.
    Fresh,
    /// Released by an owner that knew nothing was credited.
    Released,
    /// Held in doubt: a credit may have happened.
    InDoubt,
    /// The earlier owner's lease ran out with no word: it may have credited.
    Unknown,
}

impl Prior {
    /// Whether the earlier attempt must be resolved before crediting.
    pub fn needs_resolving(self) -> bool {
        matches!(self, Prior::InDoubt | Prior::Unknown)
    }
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This caller now owns the grant: credit downstream (after resolving `prior`
    /// when it asks for that), then finish.
    Claimed {
        /// The owner id to finish with.
        claim_id: String,
        /// What the earlier owner left, if the record existed.
        prior: Prior,
    },
    /// Already granted: the stored result; nothing is credited again.
    Duplicate {
        /// What the first grant stored.
        result: String,
    },
    /// Failed permanently before: the stored reason.
    FailedPermanent {
        /// What the failure stored.
        result: String,
    },
    /// Another worker holds a live lease on the trade number: try again later (never
    /// drop the request).
    RetryLater {
        /// Milliseconds left on that lease.
        lease_left_ms: u64,
    },
    /// The scene's budget shard is held by a budget change (`set_budget`), or the
    /// budget units it borrowed kept being taken by concurrent claims: nothing was
    /// claimed; try again after `hold_left_ms`.
    BudgetHeld {
        /// Milliseconds to wait, at most the hold's time left.
        hold_left_ms: u64,
    },
    /// The trade number is known with another scene, user, type or amount: never
    /// credited.
    Conflict,
    /// This trade number's budget shard has no room for the amount.
    BudgetExhausted,
    /// The scene has no budget set.
    NoBudget,
}

/// What finishing a claim did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The record moved to its final state (or was already `GRANTED`, for a grant).
    Done,
    /// The record is no longer this claim's (its lease expired and another claim took
    /// over, or it was already finished otherwise): nothing changed.
    LostLease,
}
