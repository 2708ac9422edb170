//! Resolving what an earlier owner of a grant left (module doc of [`super`]): the
//! downstream's status, a repeat under the idempotency key, or an operator.

use super::error::GrantError;
use super::granter::Granter;
use super::outcome::{Outcome, RETRY_AFTER_MS};
use crate::claim::Grant;
use crate::downstream::{Credit, CreditStatus};

/// Added to a downstream's longest call before an in-doubt grant may be resolved.
pub const SETTLE_MARGIN_MS: u64 = 1_000;

/// What the earlier owner's attempt came to, when it had to be resolved first.
pub(super) enum Resolved {
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

impl Granter {
    /// Resolves what an earlier owner left (module doc): whether to credit now, or
    /// what the grant came to without a credit.
    pub(super) async fn resolve(&self, g: &Grant, claim_id: &str) -> Result<Resolved, GrantError> {
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
}
