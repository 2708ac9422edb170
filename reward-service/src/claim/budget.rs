//! A scene's budget over its shards: setting it exactly under a hold, setting it once
//! at start-up, and reading its cap and spending.

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
