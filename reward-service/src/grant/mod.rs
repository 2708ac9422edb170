//! One grant, end to end: claim (idempotency + budget), credit downstream, finish.
//!
//! | claim says | credit | then | caller gets |
//! | --- | --- | --- | --- |
//! | claimed | ok | mark `GRANTED` with the receipt (retried if Redis fails) | `Granted` |
//! | claimed | failed, nothing credited (rate limited, connection refused, "not credited") | release the claim (the deduction stands for the retry) | `RetryLater` |
//! | claimed | **in doubt** (timeout, reset, 5xx, key in use) | record `IN_DOUBT`, leased for the downstream's longest call | `RetryLater` when the downstream can resolve it, else `InDoubt` |
//! | claimed | permanent error (invalid, account closed) | mark `FAILED`, refund, append to the failure archive | `FailedPermanent` |
//! | taken over from an owner that vanished, or in doubt | first **resolve**: ask the downstream's status (credited → `GRANTED`; not credited → credit); without a status route, repeat with the same idempotency key if it is honoured; with neither, hold `IN_DOUBT` | | as above, or `InDoubt` |
//! | duplicate | - | - | `Granted` with `duplicate: true` and the first receipt |
//! | live lease elsewhere | - | - | `RetryLater` |
//!
//! A timeout is never taken to mean "not credited": every downstream call can do its
//! work and still lose its answer ([`crate::downstream`] has the contract). A grant
//! held `InDoubt` is never credited again automatically; operators list and settle it
//! (`reward-ctl in-doubt`, [`Claims::settle_doubt`]), and the
//! `reward_service_in_doubt` gauge counts them.
//!
//! A reward type with no downstream configured is refused before any claim by the
//! service (`UNKNOWN_REWARD_TYPE`, nothing recorded, so the corrected request is
//! credited). A grant claimed while its type had a downstream that is gone now is a
//! permanent failure of that grant (refunded and archived), never a silent drop.
//!
//! # After the outcome
//! - **Granted**: the user's token moves out of the pending hash ([`crate::tokens`]).
//! - **Failed for good**: two records, both before the call returns. The failure
//!   archive, a JSON-lines file (one object per failed grant, appended and fsynced),
//!   is the local, always-available copy. The failure topic gets a
//!   [`proto::v1::DeadLetter`] (reason `permanent`) through the SDK's virtual queue,
//!   so it reaches a broker, or the SDK's spool, like any reward event; operators and
//!   the reconciliation read it there. Only the owner of the claim writes them, so a
//!   failure is recorded once however often the trade number comes back.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::claim::{Claim, ClaimError, Claims, Finish, Grant, Prior};
use crate::downstream::{Contract, Credit, CreditError, CreditStatus, Downstream, ErrorCode};
use crate::tokens::Tokens;

mod failure;
mod many;

pub use self::failure::{FailureTopic, failure_topic_misses};

/// A reward type with no downstream: a permanent failure (module doc).
fn no_downstream(reward_type: &str) -> CreditError {
    CreditError::not_credited(
        ErrorCode::Invalid,
        format!("no downstream for reward type {reward_type:?}"),
    )
}

/// The contract assumed where no downstream is configured (its grants fail for good
/// before any call).
const NO_CONTRACT: Contract = Contract {
    honours_key: false,
    status: false,
    max_call_ms: 0,
};

/// Added to a downstream's longest call before an in-doubt grant may be resolved.
pub const SETTLE_MARGIN_MS: u64 = 1_000;

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

/// Grant failures (the store itself, or the archive, failed).
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// The claim store failed.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// The failure archive could not be written (the grant is already marked failed).
    #[error("failure archive {path}: {source}")]
    Archive {
        /// The archive file.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
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

/// What the earlier owner's attempt came to, when it had to be resolved first.
enum Resolved {
    /// The downstream's status says nothing was credited: credit now, as a fresh
    /// attempt (a permanent refusal then fails the grant as usual).
    NotCredited,
    /// The key makes a repeat safe: credit now, but a permanent refusal of the repeat
    /// says nothing of the first attempt.
    Credit,
    /// It was credited: record this receipt.
    Credited(String),
    /// Neither could be told: the grant's outcome for now.
    Settled(Outcome),
}

/// How often marking a credited grant `GRANTED` is tried again when Redis fails.
const FINISH_TRIES: u32 = 4;

/// The outcome of a claim that settles the grant without a credit.
fn settled_outcome(claim: Claim) -> Outcome {
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
fn moves_token_again(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Granted {
            duplicate: true,
            ..
        }
    )
}

/// How long a retryable downstream failure asks the caller to wait.
const RETRY_AFTER_MS: u64 = 1_000;

/// Grants rewards through the claim store and the configured downstreams.
#[derive(Debug, Clone)]
pub struct Granter {
    claims: Claims,
    downstreams: Arc<HashMap<String, Arc<dyn Downstream>>>,
    archive: PathBuf,
    tokens: Option<Tokens>,
    failures: Option<FailureTopic>,
    max_amounts: Arc<HashMap<String, i64>>,
}

impl Granter {
    /// `downstreams` maps reward types to the system that credits them; permanent
    /// failures are appended to `archive` (JSON lines).
    pub fn new(
        claims: Claims,
        downstreams: HashMap<String, Arc<dyn Downstream>>,
        archive: PathBuf,
    ) -> Self {
        Self {
            claims,
            downstreams: Arc::new(downstreams),
            archive,
            tokens: None,
            failures: None,
            max_amounts: Arc::new(HashMap::new()),
        }
    }

    /// The largest amount one grant of a type may carry (types not named: up to
    /// [`crate::claim::MAX_AMOUNT`]).
    pub fn with_max_amounts(mut self, max: HashMap<String, i64>) -> Self {
        self.max_amounts = Arc::new(max);
        self
    }

    /// Whether a downstream is configured for `reward_type`.
    pub fn knows_type(&self, reward_type: &str) -> bool {
        self.downstreams.contains_key(reward_type)
    }

    /// Refuses a grant over its type's ceiling (a credential that can call `Grant`
    /// still cannot credit more than that).
    pub fn check_ceiling(&self, g: &Grant) -> Result<(), String> {
        match self.max_amounts.get(&g.reward_type) {
            Some(max) if g.amount > *max => Err(format!(
                "amount {} is over the maximum {max} for reward type {}",
                g.amount, g.reward_type
            )),
            _ => Ok(()),
        }
    }

    /// Moves each credited reward's token out of the user's pending hash.
    pub fn with_tokens(mut self, tokens: Tokens) -> Self {
        self.tokens = Some(tokens);
        self
    }

    /// Sends each permanent failure to the failure topic as well as the archive.
    pub fn with_failure_topic(mut self, topic: FailureTopic) -> Self {
        self.failures = Some(topic);
        self
    }

    /// The claim store.
    pub fn claims(&self) -> &Claims {
        &self.claims
    }

    /// The downstream of a reward type, if one is configured.
    fn downstream(&self, reward_type: &str) -> Option<&Arc<dyn Downstream>> {
        self.downstreams.get(reward_type)
    }

    fn contract(&self, reward_type: &str) -> Contract {
        self.downstream(reward_type)
            .map_or(NO_CONTRACT, |d| d.contract())
    }

    /// Grants `g` (see the module doc for every path).
    pub async fn grant(&self, g: &Grant) -> Result<Outcome, GrantError> {
        let (claim_id, prior) = match self.claims.claim(g).await? {
            Claim::Claimed { claim_id, prior } => (claim_id, prior),
            other => return Ok(self.repeat_settled(g, settled_outcome(other)).await),
        };
        let mut prior = prior;
        if prior.needs_resolving() {
            match self.resolve(g, &claim_id).await? {
                Resolved::Credit => {}
                Resolved::NotCredited => prior = Prior::Released,
                Resolved::Credited(receipt) => {
                    return self.mark_granted(g, &claim_id, receipt).await;
                }
                Resolved::Settled(outcome) => return Ok(outcome),
            }
        }
        match self.credit(g).await {
            Ok(receipt) => self.mark_granted(g, &claim_id, receipt).await,
            Err(e) => self.not_credited(g, &claim_id, e, prior).await,
        }
    }

    /// Resolves what an earlier owner left (module doc): whether to credit now, or
    /// what the grant came to without a credit.
    async fn resolve(&self, g: &Grant, claim_id: &str) -> Result<Resolved, GrantError> {
        let Some(d) = self.downstream(&g.reward_type) else {
            // Its downstream left the config while a credit may have happened there:
            // nobody here can tell, so an operator must.
            self.claims.doubt(g, claim_id, 0).await?;
            return Ok(Resolved::Settled(Outcome::InDoubt {
                reason: format!(
                    "an earlier credit may have happened, and reward type {:?} has no downstream now: held for an operator",
                    g.reward_type
                ),
            }));
        };
        let contract = d.contract();
        if contract.status {
            return match d.status(&Credit::from(g)).await {
                Ok(CreditStatus::Credited(receipt)) => Ok(Resolved::Credited(receipt)),
                Ok(CreditStatus::NotCredited) => Ok(Resolved::NotCredited),
                Err(e) => {
                    let hold = contract.max_call_ms + SETTLE_MARGIN_MS;
                    self.claims.doubt(g, claim_id, hold).await?;
                    Ok(Resolved::Settled(Outcome::RetryLater {
                        reason: format!("in doubt, status unknown: {e}"),
                        code: Some(e.code),
                        after_ms: hold.max(RETRY_AFTER_MS),
                    }))
                }
            };
        }
        if contract.honours_key {
            return Ok(Resolved::Credit);
        }
        self.claims.doubt(g, claim_id, 0).await?;
        Ok(Resolved::Settled(Outcome::InDoubt {
            reason: "an earlier credit may have happened and the downstream neither honours \
                     the idempotency key nor answers status: held for an operator"
                .into(),
        }))
    }

    /// Marks a credited grant `GRANTED`, retrying while Redis fails: a credit that
    /// happened must be recorded. Only if every try fails does the error reach the
    /// caller; the record then stays leased and the next owner resolves it.
    async fn mark_granted(
        &self,
        g: &Grant,
        claim_id: &str,
        receipt: String,
    ) -> Result<Outcome, GrantError> {
        let mut wait = Duration::from_millis(50);
        let mut tries = 0;
        let finish = loop {
            match self.claims.grant(g, claim_id, &receipt).await {
                Ok(f) => break f,
                Err(e) if tries < FINISH_TRIES => {
                    tries += 1;
                    tracing::warn!(trade_no = %g.trade_no, error = %e, "credited, but marking it GRANTED failed; trying again");
                    tokio::time::sleep(wait).await;
                    wait *= 4;
                }
                Err(e) => return Err(e.into()),
            }
        };
        Ok(self.granted(g, finish, receipt).await)
    }

    /// A grant settled without a credit. For a duplicate, the token is moved out of
    /// the pending hash again: a client that repeats a request after its reward was
    /// credited makes the SDK store the token once more, and without this move it
    /// would sit in the pending hash for good (a replay's reconciliation reports such
    /// a token). The move is idempotent and duplicates are rare.
    async fn repeat_settled(&self, g: &Grant, outcome: Outcome) -> Outcome {
        if let Some(t) = &self.tokens
            && moves_token_again(&outcome)
        {
            t.credited(&g.user_id, &g.activity_id, &g.trade_no).await;
        }
        outcome
    }

    /// Credits `g` downstream.
    async fn credit(&self, g: &Grant) -> Result<String, CreditError> {
        match self.downstream(&g.reward_type) {
            Some(d) => d.credit(&Credit::from(g)).await,
            None => Err(no_downstream(&g.reward_type)),
        }
    }

    /// After the record says `GRANTED` (or could not be marked).
    async fn granted(&self, g: &Grant, finish: Finish, receipt: String) -> Outcome {
        match finish {
            Finish::Done => {
                if let Some(t) = &self.tokens {
                    t.credited(&g.user_id, &g.activity_id, &g.trade_no).await;
                }
                Outcome::Granted {
                    receipt,
                    duplicate: false,
                }
            }
            Finish::LostLease => {
                tracing::error!(trade_no = %g.trade_no, "credited, but its record was already finished otherwise (failed or gone)");
                Outcome::LeaseLost { receipt }
            }
        }
    }

    /// A credit failed: in doubt (hold and resolve later, or for an operator),
    /// retryable with nothing credited (release), or permanent (fail, refund, archive
    /// and failure topic, once, by the owner).
    async fn not_credited(
        &self,
        g: &Grant,
        claim_id: &str,
        e: CreditError,
        prior: Prior,
    ) -> Result<Outcome, GrantError> {
        // A permanent refusal of a repeat says nothing about the first attempt (a
        // wallet may refuse a key it credited, or close the account since): the grant
        // is not failed and refunded, it is held for an operator.
        if prior.needs_resolving() && !e.code.retryable() && !e.in_doubt {
            self.claims.doubt(g, claim_id, 0).await?;
            return Ok(Outcome::InDoubt {
                reason: format!(
                    "{e}, after an earlier attempt that may have credited: held for an operator"
                ),
            });
        }
        if e.in_doubt {
            let contract = self.contract(&g.reward_type);
            let hold = contract.max_call_ms + SETTLE_MARGIN_MS;
            self.claims.doubt(g, claim_id, hold).await?;
            tracing::warn!(trade_no = %g.trade_no, error = %e, "credit in doubt; held until it is resolved");
            return Ok(if contract.resolvable() {
                Outcome::RetryLater {
                    reason: format!("in doubt: {e}"),
                    code: Some(e.code),
                    after_ms: hold.max(RETRY_AFTER_MS),
                }
            } else {
                Outcome::InDoubt {
                    reason: format!(
                        "{e}; the downstream neither honours the idempotency key nor answers \
                         status: held for an operator"
                    ),
                }
            });
        }
        if e.code.retryable() {
            self.claims.release(g, claim_id).await?;
            return Ok(Outcome::RetryLater {
                reason: e.to_string(),
                code: Some(e.code),
                after_ms: RETRY_AFTER_MS,
            });
        }
        let reason = e.to_string();
        if self.claims.fail(g, claim_id, &reason).await? == Finish::Done {
            self.archive_failure(g, &e).await?;
            self.publish_failure(g, &e).await;
        }
        Ok(Outcome::FailedPermanent {
            reason,
            code: Some(e.code),
        })
    }
}
