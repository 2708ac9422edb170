//! What a grant came to ([`Outcome`]), and the outcome of a claim that settles the
//! grant without a credit.

use crate::claim::{Claim, Prior};
use crate::downstream::ErrorCode;

/// What a grant came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Credited (now, or by an earlier call when `duplicate`).
    Granted {
        /// The downstream's receipt.
        receipt: String,
        /// True when an earlier call had already granted it.
        duplicate: bool,
    },
    /// Not credited yet; send again later (never drop it).
    RetryLater {
        /// Why.
        reason: String,
        /// The downstream's error when a credit failed; `None` when another worker
        /// holds a live lease on the trade number.
        code: Option<ErrorCode>,
        /// A hint for when to try again.
        after_ms: u64,
    },
    /// Never to be credited; its budget was given back.
    FailedPermanent {
        /// Why.
        reason: String,
        /// The downstream's error; `None` when an earlier call recorded the failure.
        code: Option<ErrorCode>,
    },
    /// Its scene's budget is being changed (a short hold while `reward-ctl budget`
    /// sets it exactly): nothing was claimed; send it again after `after_ms`.
    BudgetHeld {
        /// The hold's time left at most, ms.
        after_ms: u64,
    },
    /// The trade number is known with other fields: never credited.
    Conflict,
    /// No room in the budget for it.
    BudgetExhausted,
    /// Its scene has no budget.
    NoBudget,
    /// Credited, but the record could not be marked (it had been finished otherwise
    /// meanwhile); logged loudly.
    LeaseLost {
        /// The downstream's receipt of this call's credit.
        receipt: String,
    },
    /// The credit may have happened and the downstream can neither repeat it safely
    /// nor say: held `IN_DOUBT` for an operator, never credited again automatically.
    InDoubt {
        /// Why.
        reason: String,
    },
}

/// A claim that settles the grant without a credit (duplicate, conflict, no budget,
/// ...) as its outcome; `Ok` with the claim id when this caller now owns the grant.
pub fn settled(claim: Claim) -> Result<(String, Prior), Outcome> {
    match claim {
        Claim::Claimed { claim_id, prior } => Ok((claim_id, prior)),
        other => Err(settled_outcome(other)),
    }
}

/// The outcome of a claim that settles the grant without a credit.
pub(super) fn settled_outcome(claim: Claim) -> Outcome {
    match claim {
        Claim::Claimed { .. } => Outcome::RetryLater {
            reason: "claimed but not credited".into(),
            code: None,
            after_ms: RETRY_AFTER_MS,
        },
        Claim::Duplicate { result } => Outcome::Granted {
            receipt: result,
            duplicate: true,
        },
        Claim::FailedPermanent { result } => Outcome::FailedPermanent {
            reason: result,
            code: None,
        },
        Claim::RetryLater { lease_left_ms } => Outcome::RetryLater {
            reason: format!("another worker holds it for {lease_left_ms} ms"),
            code: None,
            after_ms: lease_left_ms,
        },
        Claim::BudgetHeld { hold_left_ms } => Outcome::BudgetHeld {
            after_ms: hold_left_ms,
        },
        Claim::Conflict => Outcome::Conflict,
        Claim::BudgetExhausted => Outcome::BudgetExhausted,
        Claim::NoBudget => Outcome::NoBudget,
    }
}

/// Whether a grant settled without a credit moves its token again: a duplicate of a
/// granted reward (see `Granter::repeat_settled`).
pub(super) fn moves_token_again(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Granted {
            duplicate: true,
            ..
        }
    )
}

/// How long a retryable downstream failure asks the caller to wait.
pub(super) const RETRY_AFTER_MS: u64 = 1_000;
