//! Grants held in doubt ([`Doubt`]): listing them for operators (dropping entries no longer in
//! doubt), counting them, and settling one on an operator's verdict.

use fred::prelude::*;

use super::error::ClaimError;
use super::grant::Grant;
use super::outcome::Claim;
use super::record::{ClaimState, Record};
use super::store::Claims;

/// An in-doubt grant as the operator's list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doubt {
    /// The trade number.
    pub trade_no: String,
    /// Since when it is in doubt (Unix ms, Redis's clock).
    pub since_ms: i64,
    /// Its record, when it still has one.
    pub record: Option<Record>,
}

impl Claims {
    /// Every grant held in doubt, oldest first, with its record (for operators).
    pub async fn in_doubt(&self) -> Result<Vec<Doubt>, ClaimError> {
        let mut out = Vec::new();
        for shard in 0..self.cfg.shards {
            let listed: Vec<(String, f64)> = self
                .pool
                .next()
                .zrange(self.doubt_key(shard), 0, -1, None, false, None, true)
                .await?;
            for (trade_no, since) in listed {
                let record = self.record(&trade_no).await?;
                // A record that expired (or was settled elsewhere) leaves the list,
                // unless it was put back in doubt meanwhile (checked in the script).
                if record
                    .as_ref()
                    .is_none_or(|r| r.state != ClaimState::InDoubt)
                {
                    let _: i64 = self
                        .scripts
                        .sweep
                        .eval(self.pool.next(), || {
                            (
                                vec![self.doubt_key(shard), self.record_key(shard, &trade_no)],
                                vec![Value::from(trade_no.as_str())],
                            )
                        })
                        .await?;
                    continue;
                }
                out.push(Doubt {
                    trade_no,
                    since_ms: since as i64,
                    record,
                });
            }
        }
        out.sort_by_key(|d| d.since_ms);
        Ok(out)
    }

    /// How many entries the doubt index holds (the `reward_service_in_doubt` gauge):
    /// one `ZCARD` per shard. Entries whose record is gone are dropped by
    /// [`Claims::in_doubt`] (what `reward-ctl in-doubt` lists).
    pub async fn in_doubt_count(&self) -> Result<u64, ClaimError> {
        let mut n = 0;
        for shard in 0..self.cfg.shards {
            let c: u64 = self.pool.next().zcard(self.doubt_key(shard)).await?;
            n += c;
        }
        Ok(n)
    }

    /// An operator's verdict on an in-doubt grant after checking the downstream:
    /// `Some(receipt)` marks it `GRANTED`; `None` (the downstream never credited it)
    /// releases it cleanly, so the next grant of the trade number credits it (a
    /// redelivery of its event, or a withdrawal of its token: the consumer already
    /// acknowledged the event it held in doubt). Returns whether the record was in
    /// doubt.
    pub async fn settle_doubt(
        &self,
        trade_no: &str,
        receipt: Option<&str>,
    ) -> Result<bool, ClaimError> {
        let Some(rec) = self.record(trade_no).await? else {
            return Ok(false);
        };
        if rec.state != ClaimState::InDoubt {
            return Ok(false);
        }
        let g = Grant {
            scene: rec.scene,
            activity_id: rec.activity_id,
            trade_no: trade_no.to_string(),
            user_id: rec.user_id,
            reward_type: rec.reward_type,
            amount: rec.amount,
        };
        // Take the record over as an owner would (its hold must be over), then finish.
        let claim_id = match self.claim(&g).await? {
            Claim::Claimed { claim_id, .. } => claim_id,
            Claim::RetryLater { lease_left_ms } => {
                return Err(ClaimError::Redis(format!(
                    "{trade_no} is held for {lease_left_ms} ms more; try again then"
                )));
            }
            _ => return Ok(false),
        };
        match receipt {
            Some(r) => {
                self.grant(&g, &claim_id, r).await?;
            }
            None => {
                self.release(&g, &claim_id).await?;
            }
        }
        Ok(true)
    }
}
