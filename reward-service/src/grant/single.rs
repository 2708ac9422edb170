//! One grant, end to end: claim, resolve what an earlier owner left, credit, finish
//! (the table of the module doc of [`super`]).

use std::time::Duration;

use super::error::GrantError;
use super::granter::{Granter, no_downstream};
use super::outcome::{Outcome, RETRY_AFTER_MS, moves_token_again, settled_outcome};
use super::resolve::{Resolved, SETTLE_MARGIN_MS};
use crate::claim::{Claim, Finish, Grant, Prior};
use crate::downstream::{Credit, CreditError};

/// How often marking a credited grant `GRANTED` is tried again when Redis fails.
const FINISH_TRIES: u32 = 4;

impl Granter {
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

    /// Marks a credited grant `GRANTED`, retrying while Redis fails: a credit that
    /// happened must be recorded. Only if every try fails does the error reach the
    /// caller; the record then stays leased and the next owner resolves it.
    pub(super) async fn mark_granted(
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
    pub(super) async fn granted(&self, g: &Grant, finish: Finish, receipt: String) -> Outcome {
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
    pub(super) async fn not_credited(
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
