//! A scene's budget over its shards: setting it exactly under a hold, setting it once
//! at start-up, moving unspent budget to a shard that ran out, and reading its cap and
//! spending.
//!
//! # Spent to the last unit, never over
//! A scene's budget is split over its shards so that each claim touches one shard's
//! key beside its record (one script, one slot). An even split alone would leave
//! budget unspendable: a grant larger than its shard's headroom, or the last grants of
//! a scene whose spending landed unevenly, would be refused while other shards still
//! hold room. So a claim that finds its shard exhausted moves headroom from the
//! scene's other shards into it ([`Claims::borrow`]) and asks again. The invariant:
//! **the sum of a scene's caps never exceeds its total**, and each shard's spending
//! never exceeds its cap (checked and deducted in one script), so the scene never
//! overspends. A move lowers the lender's cap first (`LEND`, at most its headroom, in
//! its own script) and then raises the borrower's (`BORROW`): between the two, and if
//! the process dies between them, the sum is lower, never higher. A `BORROW` whose
//! budget was set exactly since the `LEND` (a different epoch) or is held by a change
//! is refused: that set already divided the total afresh. Units a move could not
//! hand over are unspendable until the scene's budget is set again
//! (`reward-ctl budget`), and counted (`reward_service_budget_moves_total{result}`).
//! Moves happen only at a shard's end, so the hot path is unchanged.

use fred::prelude::*;

use super::keys::{check_id, new_claim_id, secs};
use super::{BUDGET_HOLD_MS, ClaimError, Claims, MAX_AMOUNT};

impl Claims {
    /// Sets a scene's total budget exactly (module doc): holds its shards, reads
    /// their spending, gives each its spending plus an even share of the rest.
    /// Refused below what the scene has spent. Returns what it had spent.
    pub async fn set_budget(&self, scene: &str, total: i64) -> Result<i64, ClaimError> {
        check_id("scene", scene)?;
        if !(0..=MAX_AMOUNT).contains(&total) {
            return Err(ClaimError::Invalid("budget must be in 0..=2^53-1"));
        }
        let holder = new_claim_id();
        let mut spent = Vec::with_capacity(self.cfg.shards as usize);
        let mut outcome = Ok(());
        for shard in 0..self.cfg.shards {
            let s: Result<i64, ClaimError> = self
                .scripts
                .hold
                .eval(self.pool.next(), || {
                    (
                        vec![self.budget_key(scene, shard)],
                        vec![secs(BUDGET_HOLD_MS), Value::from(holder.as_str())],
                    )
                })
                .await
                .map_err(Into::into);
            match s {
                Ok(-1) => {
                    outcome = Err(ClaimError::BudgetBusy(scene.to_string()));
                    break;
                }
                Ok(v) => spent.push(v),
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        let sum: i64 = spent.iter().sum();
        if outcome.is_ok() && total < sum {
            outcome = Err(ClaimError::BelowSpent {
                scene: scene.to_string(),
                total,
                spent: sum,
            });
        }
        let n = i64::from(self.cfg.shards);
        let left = total - sum;
        let mut done = 0u32;
        for shard in 0..self.cfg.shards {
            let cap = match (&outcome, spent.get(shard as usize)) {
                (Ok(()), Some(s)) => {
                    (s + left / n + i64::from(i64::from(shard) < left % n)).to_string()
                }
                _ => String::new(),
            };
            let unheld: Result<i64, fred::error::Error> = self
                .scripts
                .unhold
                .eval(self.pool.next(), || {
                    (
                        vec![self.budget_key(scene, shard)],
                        vec![Value::from(holder.as_str()), Value::from(cap.as_str())],
                    )
                })
                .await;
            match (&outcome, unheld) {
                (Ok(()), Ok(1)) => done += 1,
                (Ok(()), _) if done == 0 => {
                    outcome = Err(ClaimError::BudgetBusy(scene.to_string()));
                }
                (Ok(()), _) => {
                    outcome = Err(ClaimError::BudgetPartial {
                        scene: scene.to_string(),
                        done,
                        shards: self.cfg.shards,
                    });
                }
                _ => {}
            }
        }
        outcome.map(|()| sum)
    }

    /// Moves up to `want` of unspent budget from the scene's other shards into
    /// `shard` (module doc); answers how much it moved. Lenders are asked in turn from
    /// the shard after this one, so concurrent borrowers spread over them.
    pub(super) async fn borrow(
        &self,
        scene: &str,
        shard: u32,
        want: i64,
    ) -> Result<i64, ClaimError> {
        let n = self.cfg.shards;
        let mut moved = 0i64;
        for step in 1..n {
            if moved >= want {
                break;
            }
            let lender = (shard + step) % n;
            let lent: Vec<i64> = self
                .scripts
                .lend
                .eval(self.pool.next(), || {
                    (
                        vec![self.budget_key(scene, lender)],
                        vec![Value::from((want - moved).to_string())],
                    )
                })
                .await?;
            let (given, epoch) = match lent.as_slice() {
                [given, epoch] => (*given, *epoch),
                _ => return Err(ClaimError::Reply(lent.iter().map(i64::to_string).collect())),
            };
            if given <= 0 {
                continue;
            }
            let taken: Result<i64, fred::error::Error> = self
                .scripts
                .borrow
                .eval(self.pool.next(), || {
                    (
                        vec![self.budget_key(scene, shard)],
                        vec![
                            Value::from(given.to_string()),
                            Value::from(epoch.to_string()),
                        ],
                    )
                })
                .await;
            match taken {
                Ok(1) => {
                    moved += given;
                    metrics::counter!("reward_service_budget_moves_total", "result" => "moved")
                        .increment(1);
                }
                Ok(_) => {
                    metrics::counter!("reward_service_budget_moves_total", "result" => "refused")
                        .increment(1);
                    tracing::warn!(
                        scene,
                        lender,
                        shard,
                        units = given,
                        "a budget move was refused: the budget was set or held meanwhile; the units are counted in that set's caps"
                    );
                    break;
                }
                Err(e) => {
                    metrics::counter!("reward_service_budget_moves_total", "result" => "lost")
                        .increment(1);
                    tracing::error!(scene, lender, shard, units = given, error = %e,
                        "a budget move's second half did not answer: its units were handed over, or stay unspendable until `reward-ctl budget` sets the scene again (never spendable twice)");
                    return Err(e.into());
                }
            }
        }
        Ok(moved)
    }

    /// Sets a scene's budget only if it has none yet (what a start-up does with its
    /// configured budgets: a live change is never overwritten). Returns whether it
    /// set it.
    pub async fn init_budget(&self, scene: &str, total: i64) -> Result<bool, ClaimError> {
        check_id("scene", scene)?;
        if !(0..=MAX_AMOUNT).contains(&total) {
            return Err(ClaimError::Invalid("budget must be in 0..=2^53-1"));
        }
        let n = i64::from(self.cfg.shards);
        let mut set = false;
        for shard in 0..self.cfg.shards {
            let cap = total / n + i64::from(i64::from(shard) < total % n);
            let fresh: i64 = self
                .pool
                .next()
                .hsetnx(self.budget_key(scene, shard), "cap", cap)
                .await?;
            set |= fresh == 1;
        }
        Ok(set)
    }

    /// A scene's total budget (the sum of its shards' caps; 0 when never set).
    pub async fn budget(&self, scene: &str) -> Result<i64, ClaimError> {
        check_id("scene", scene)?;
        let mut sum = 0;
        for shard in 0..self.cfg.shards {
            let v: Option<i64> = self
                .pool
                .next()
                .hget(self.budget_key(scene, shard), "cap")
                .await?;
            sum += v.unwrap_or(0);
        }
        Ok(sum)
    }

    /// What a scene has spent, over all shards.
    pub async fn spent(&self, scene: &str) -> Result<i64, ClaimError> {
        let mut sum = 0;
        for shard in 0..self.cfg.shards {
            sum += self.shard_spent(scene, shard).await?;
        }
        Ok(sum)
    }

    /// What one shard has spent.
    pub async fn shard_spent(&self, scene: &str, shard: u32) -> Result<i64, ClaimError> {
        check_id("scene", scene)?;
        let v: Option<i64> = self
            .pool
            .next()
            .hget(self.budget_key(scene, shard), "spent")
            .await?;
        Ok(v.unwrap_or(0))
    }
}
