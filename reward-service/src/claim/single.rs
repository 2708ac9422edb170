//! One grant at a time: reading a record, claiming it, and finishing it (granted or
//! failed) or giving it up (cleanly or in doubt).

use fred::prelude::*;

use super::budget::{BORROW_TRIES, BUDGET_HOLD_MS, Borrowed, HOLD_RETRY_MS};
use super::checks::{check_grant, check_id, new_claim_id, secs};
use super::error::{ClaimError, unreadable_record};
use super::grant::Grant;
use super::outcome::{Claim, Finish, Prior};
use super::record::{ClaimState, Record};
use super::store::Claims;

impl Claims {
    /// The record of `trade_no`, if there is one (whatever its scene).
    pub async fn record(&self, trade_no: &str) -> Result<Option<Record>, ClaimError> {
        check_id("trade number", trade_no)?;
        let key = self.record_key(self.shard_of(trade_no), trade_no);
        // Through a script, so the reply is proven to be this read's
        // (reward_runtime::script, "Every reply proves whose it is").
        let v: Option<String> = self
            .scripts
            .get
            .eval(self.pool.next(), || {
                (vec![key.clone()], Vec::<Value>::new())
            })
            .await?;
        match v {
            None => Ok(None),
            Some(text) => Record::parse(&text)
                .map(Some)
                .ok_or_else(|| ClaimError::Reply(vec![text])),
        }
    }

    /// Claims `g`: checks its idempotency record and, for a new trade number, deducts
    /// its amount from its budget shard, in one atomic step. A shard without room
    /// for it first borrows the scene's unspent budget from the other shards
    /// ([`Claims::borrow`]), so a grant is refused `BudgetExhausted` only when no
    /// other shard had room; `BudgetHeld` when a budget change is in the way, or when
    /// concurrent claims took what it borrowed [`BORROW_TRIES`] times.
    pub async fn claim(&self, g: &Grant) -> Result<Claim, ClaimError> {
        let mut tries = 0;
        loop {
            let claim = self.claim_once(g).await?;
            if !matches!(claim, Claim::BudgetExhausted) {
                return Ok(claim);
            }
            if tries == BORROW_TRIES {
                // Every borrow moved units and concurrent claims took them: the scene
                // still has room somewhere, so never a false exhaustion.
                return Ok(Claim::BudgetHeld {
                    hold_left_ms: HOLD_RETRY_MS,
                });
            }
            tries += 1;
            let shard = self.shard_of(&g.trade_no);
            match self.borrow(&g.scene, shard, g.amount).await? {
                Borrowed::Moved(_) => {}
                Borrowed::Held(ms) => return Ok(Claim::BudgetHeld { hold_left_ms: ms }),
                Borrowed::Nothing => return Ok(claim),
            }
        }
    }

    /// One claim script run, no borrowing.
    async fn claim_once(&self, g: &Grant) -> Result<Claim, ClaimError> {
        check_grant(g)?;
        let shard = self.shard_of(&g.trade_no);
        let claim_id = new_claim_id();
        let client = self.pool.next();
        let reply: Vec<String> = self
            .scripts
            .claim
            .eval(client, || {
                (
                    vec![
                        self.record_key(shard, &g.trade_no),
                        self.budget_key(&g.scene, shard),
                    ],
                    vec![
                        Value::from(g.user_id.as_str()),
                        Value::from(g.reward_type.as_str()),
                        Value::from(g.amount.to_string()),
                        secs(self.cfg.lease_ms),
                        secs(self.cfg.retention_secs),
                        Value::from(claim_id.as_str()),
                        Value::from(g.scene.as_str()),
                        Value::from(g.activity_id.as_str()),
                    ],
                )
            })
            .await?;
        self.replicated(client, &self.record_key(shard, &g.trade_no))
            .await?;
        match reply.as_slice() {
            [code, detail] => self.decode(code, detail.clone(), claim_id),
            _ => Err(ClaimError::Reply(reply)),
        }
    }

    /// A claim script's answer for one grant.
    pub(super) fn decode(
        &self,
        code: &str,
        detail: String,
        claim_id: String,
    ) -> Result<Claim, ClaimError> {
        let claimed = |prior| Claim::Claimed {
            claim_id: claim_id.clone(),
            prior,
        };
        Ok(match code {
            "CLAIMED" => claimed(Prior::Fresh),
            "RESUME" => claimed(Prior::Released),
            "RESOLVE" => claimed(Prior::InDoubt),
            "TAKEOVER" => claimed(Prior::Unknown),
            "DUPLICATE" => Claim::Duplicate { result: detail },
            "FAILED" => Claim::FailedPermanent { result: detail },
            "RETRY" => Claim::RetryLater {
                lease_left_ms: detail.parse().unwrap_or(self.cfg.lease_ms),
            },
            "HELD" => Claim::BudgetHeld {
                hold_left_ms: detail.parse().unwrap_or(BUDGET_HOLD_MS),
            },
            "CONFLICT" => Claim::Conflict,
            "EXHAUSTED" => Claim::BudgetExhausted,
            "NOBUDGET" => Claim::NoBudget,
            "BADRECORD" => {
                unreadable_record();
                return Err(ClaimError::Reply(vec![code.to_string(), detail]));
            }
            _ => return Err(ClaimError::Reply(vec![code.to_string(), detail])),
        })
    }

    async fn finish_one(
        &self,
        g: &Grant,
        claim_id: &str,
        state: ClaimState,
        result: &str,
    ) -> Result<Finish, ClaimError> {
        let item = [(g.clone(), claim_id.to_string(), result.to_string())];
        self.finish_many(&item, state)
            .await
            .pop()
            .unwrap_or_else(|| Err(ClaimError::Redis("no answer".into())))
    }

    /// Marks a credited grant `GRANTED`, storing `result` (the receipt) for
    /// duplicates to get back.
    pub async fn grant(
        &self,
        g: &Grant,
        claim_id: &str,
        result: &str,
    ) -> Result<Finish, ClaimError> {
        self.finish_one(g, claim_id, ClaimState::Granted, result)
            .await
    }

    /// Marks a claimed grant failed for good and gives its amount back to the budget
    /// (only the claim's owner can).
    pub async fn fail(
        &self,
        g: &Grant,
        claim_id: &str,
        reason: &str,
    ) -> Result<Finish, ClaimError> {
        self.finish_one(g, claim_id, ClaimState::Failed, reason)
            .await
    }

    async fn release_as(
        &self,
        g: &Grant,
        claim_id: &str,
        mode: &str,
        hold_ms: u64,
    ) -> Result<Finish, ClaimError> {
        check_id("trade number", &g.trade_no)?;
        let shard = self.shard_of(&g.trade_no);
        let done: i64 = self
            .scripts
            .release
            .eval(self.pool.next(), || {
                (
                    vec![self.record_key(shard, &g.trade_no), self.doubt_key(shard)],
                    vec![
                        Value::from(claim_id),
                        Value::from(mode),
                        secs(hold_ms),
                        Value::from(g.trade_no.as_str()),
                    ],
                )
            })
            .await?;
        Ok(if done == 1 {
            Finish::Done
        } else {
            Finish::LostLease
        })
    }

    /// Gives a claim up after a failure that credited nothing: the next claim of the
    /// trade number credits at once (no second deduction).
    pub async fn release(&self, g: &Grant, claim_id: &str) -> Result<Finish, ClaimError> {
        self.release_as(g, claim_id, "clean", 0).await
    }

    /// Gives a claim up after a credit whose outcome is unknown: the record becomes
    /// `IN_DOUBT` (listed for operators) and no one takes it over for `hold_ms`, so
    /// the earlier call has settled before it is resolved.
    pub async fn doubt(
        &self,
        g: &Grant,
        claim_id: &str,
        hold_ms: u64,
    ) -> Result<Finish, ClaimError> {
        self.release_as(g, claim_id, "doubt", hold_ms).await
    }
}
