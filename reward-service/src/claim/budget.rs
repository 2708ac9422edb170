//! A scene's budget over its shards: setting it exactly under a hold, setting it once
//! at start-up, moving unspent budget to a shard that ran out, and reading its cap and
//! spending.
//!
//! # Spent to the last unit, never over
//! A scene's budget is split over its shards so that each claim touches one shard's
//! key beside its record (one script, one slot). An even split alone would leave
//! budget unspendable: a grant larger than its shard's headroom, or the last grants of
//! a scene whose spending landed unevenly, would be refused while other shards still
//! hold room. So a claim that finds its shard short moves the shortfall from the
//! scene's other shards into it ([`Claims::borrow`]) and asks again.
//!
//! The invariant: **the caps of the shards that one budget change divided sum to at
//! most that change's total**, and each shard's spending never exceeds its cap
//! (checked and deducted in one script), so the scene never overspends. Each exact set
//! ([`Claims::set_budget`]) stamps the shards it gives caps with its own unique id
//! (`set`); a move happens only between two shards stamped by the same set (checked
//! by the lender before it lends and by the borrower before it takes) and neither
//! held by a change. A move lowers the lender's cap first (`LEND`, at most its
//! headroom) and then raises the borrower's (`BORROW`): between the two, and if the
//! process dies between them, the sum is lower, never higher. A `BORROW` that arrives
//! after a change stamped the borrower anew is refused: the units it carried were
//! either divided afresh by that change (it reached the lender too) or are stranded,
//! unspendable, until the next change; never spendable twice. Stranded and refused
//! moves are counted (`reward_service_budget_moves_total{result}`).
//!
//! A claim answers `BudgetExhausted` only when no other shard had room to lend; when a
//! change holds the shards it answers `BudgetHeld` (try again after the hold), and
//! when concurrent claims kept taking what it borrowed it answers `BudgetHeld` with a
//! short wait rather than a false exhaustion. Moves happen only at a shard's end, so
//! the hot path is unchanged.

use fred::prelude::*;

use super::checks::{MAX_AMOUNT, check_id, new_claim_id, secs};
use super::error::ClaimError;
use super::store::Claims;

/// How long a budget change may hold a scene's shards (a crashed operator's hold
/// ends by itself after this).
pub const BUDGET_HOLD_MS: u64 = 5_000;

/// How often a claim whose shard ran out borrows from the other shards and asks again
/// before it answers `BudgetExhausted`: concurrent claims can take what it borrowed.
pub const BORROW_TRIES: u32 = 3;

/// What a borrow came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Borrowed {
    /// Units moved into the shard (0: room appeared meanwhile): ask again.
    Moved(i64),
    /// A budget change holds shards (or reached this one meanwhile): try again in
    /// about this many ms.
    Held(u64),
    /// No other shard of the same division had room: the scene lacks it.
    Nothing,
}

/// The wait a claim is told when a change got in the way of its move, or when
/// concurrent claims kept taking what it borrowed, ms.
pub const HOLD_RETRY_MS: u64 = 100;

/// How long a budget move's second half waits out a moving slot (reward_runtime::redis:
/// redirections are not followed) before its units are counted stranded.
const BORROW_REDIRECTED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Budget moves, counted by result (registered at 0 by the service).
fn moves_counted(result: &'static str) {
    metrics::counter!("reward_service_budget_moves_total", "result" => result).increment(1);
}

/// The results of `reward_service_budget_moves_total`.
pub use reward_runtime::catalogue::MOVE_RESULTS;

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

    /// Moves into `shard` what it lacks for a grant of `amount`, from the scene's
    /// other shards stamped by the same budget set (module doc). Lenders are asked in
    /// turn from the shard after this one, so concurrent borrowers spread over them.
    pub(super) async fn borrow(
        &self,
        scene: &str,
        shard: u32,
        amount: i64,
    ) -> Result<Borrowed, ClaimError> {
        let key = self.budget_key(scene, shard);
        let (cap, spent, hold, set): (Option<i64>, Option<i64>, Option<i64>, Option<String>) = self
            .scripts
            .hmget
            .eval(self.pool.next(), || {
                (
                    vec![key.clone()],
                    ["cap", "spent", "hold", "set"].map(Value::from).to_vec(),
                )
            })
            .await?;
        let now = reward_runtime::clock::now_ms();
        if let Some(h) = hold.filter(|h| *h > now) {
            return Ok(Borrowed::Held(u64::try_from(h - now).unwrap_or(1)));
        }
        let Some(cap) = cap else {
            return Ok(Borrowed::Nothing);
        };
        let set = set.unwrap_or_default();
        let want = amount - (cap - spent.unwrap_or(0));
        if want <= 0 {
            // Room appeared meanwhile (a refund): ask again.
            return Ok(Borrowed::Moved(0));
        }
        let n = self.cfg.shards;
        let (mut moved, mut held_ms) = (0i64, None::<u64>);
        for step in 1..n {
            if moved >= want {
                break;
            }
            let lender = (shard + step) % n;
            let lent: Result<Vec<i64>, fred::error::Error> = self
                .scripts
                .lend
                .eval(self.pool.next(), || {
                    (
                        vec![self.budget_key(scene, lender)],
                        vec![
                            Value::from((want - moved).to_string()),
                            Value::from(set.as_str()),
                        ],
                    )
                })
                .await;
            let lent = match lent {
                Ok(l) => l,
                // Redirected by a moving slot: the lend did not run, nothing moved and
                // nothing is stranded (not a move: not counted).
                Err(e) if reward_runtime::redis::is_redirected(&e) => return Err(e.into()),
                Err(e) => {
                    // The lend may have happened with its answer lost: its units are
                    // stranded until the next change (never spendable twice).
                    moves_counted("lost");
                    return Err(e.into());
                }
            };
            let (given, note) = match lent.as_slice() {
                [given, note] => (*given, *note),
                _ => return Err(ClaimError::Reply(lent.iter().map(i64::to_string).collect())),
            };
            if given <= 0 {
                if note > 0 {
                    held_ms = Some(held_ms.unwrap_or(0).max(u64::try_from(note).unwrap_or(1)));
                }
                continue;
            }
            // The lent units are in no shard until this lands: a redirection (the
            // borrowing shard's slot moving; the call did not run) is waited out for
            // up to BORROW_REDIRECTED_WAIT before they are given up as stranded.
            let borrow_until = tokio::time::Instant::now() + BORROW_REDIRECTED_WAIT;
            let taken: Result<i64, fred::error::Error> = loop {
                let r = self
                    .scripts
                    .borrow
                    .eval(self.pool.next(), || {
                        (
                            vec![key.clone()],
                            vec![Value::from(given.to_string()), Value::from(set.as_str())],
                        )
                    })
                    .await;
                match r {
                    Err(e)
                        if reward_runtime::redis::is_redirected(&e)
                            && tokio::time::Instant::now() < borrow_until =>
                    {
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                    other => break other,
                }
            };
            match taken {
                Ok(1) => {
                    moved += given;
                    moves_counted("moved");
                }
                Ok(_) => {
                    moves_counted("refused");
                    tracing::warn!(
                        scene,
                        lender,
                        shard,
                        units = given,
                        "a budget move was refused: a budget change reached the borrowing shard meanwhile; the units are in that change's division, or unspendable until the next change"
                    );
                    return Ok(Borrowed::Held(HOLD_RETRY_MS));
                }
                Err(e) => {
                    moves_counted("lost");
                    tracing::error!(scene, lender, shard, units = given, error = %e,
                        "a budget move's second half did not answer: its units were handed over, or stay unspendable until `reward-ctl budget` sets the scene again (never spendable twice)");
                    return Err(e.into());
                }
            }
        }
        Ok(match (moved, held_ms) {
            (0, Some(ms)) => Borrowed::Held(ms),
            (0, None) => Borrowed::Nothing,
            (m, _) => Borrowed::Moved(m),
        })
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

    /// A scene's total budget (`None` when no shard has a cap: never set) and what it
    /// has spent, read shard by shard (an operator's read, not the grant path's).
    pub async fn budget_state(&self, scene: &str) -> Result<(Option<i64>, i64), ClaimError> {
        check_id("scene", scene)?;
        let (mut total, mut spent) = (None::<i64>, 0i64);
        for shard in 0..self.cfg.shards {
            let (cap, s): (Option<i64>, Option<i64>) = self
                .pool
                .next()
                .hmget(self.budget_key(scene, shard), vec!["cap", "spent"])
                .await?;
            if let Some(c) = cap {
                total = Some(total.unwrap_or(0).saturating_add(c));
            }
            spent = spent.saturating_add(s.unwrap_or(0));
        }
        Ok((total, spent))
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
