//! One grant, end to end: claim (idempotency + budget), credit downstream, finish.
//!
//! | claim says | credit | then | caller gets |
//! | --- | --- | --- | --- |
//! | claimed | ok | mark `GRANTED` with the receipt | `Granted` |
//! | claimed | retryable error (timeout, rate limited, unavailable) | release the claim (the deduction stands for the retry) | `RetryLater` |
//! | claimed | permanent error (invalid, account closed) | mark `FAILED`, refund, append to the failure archive | `FailedPermanent` |
//! | duplicate | - | - | `Granted` with `duplicate: true` and the first receipt |
//! | live lease elsewhere | - | - | `RetryLater` |
//!
//! A reward type with no downstream configured is a permanent failure of that grant
//! (refunded and archived), never a silent drop. The failure archive is a JSON-lines
//! file, one object per permanently failed grant, appended and flushed before the
//! call returns.
//!
//! Not yet here (issue 4): deleting the user's token after the credit, sending
//! permanent failures to the failure topic through the SDK's queue.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use crate::claim::{Claim, ClaimError, Claims, Finish, Grant};
use crate::downstream::{Credit, CreditError, Downstream, ErrorCode};

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
    },
    /// Never to be credited; its budget was given back.
    FailedPermanent {
        /// Why.
        reason: String,
    },
    /// The trade number is known with other fields: never credited.
    Conflict,
    /// No room in the budget for it.
    BudgetExhausted,
    /// Its scene has no budget.
    NoBudget,
    /// Credited, but the claim had expired and another worker owns the record now;
    /// that worker's downstream call carries the same idempotency key.
    LeaseLost {
        /// The downstream's receipt of this call's credit.
        receipt: String,
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

/// Grants rewards through the claim store and the configured downstreams.
#[derive(Debug, Clone)]
pub struct Granter {
    claims: Claims,
    downstreams: Arc<HashMap<String, Arc<dyn Downstream>>>,
    archive: PathBuf,
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
        }
    }

    /// Grants `g` (see the module doc for every path).
    pub async fn grant(&self, g: &Grant) -> Result<Outcome, GrantError> {
        let claim_id = match self.claims.claim(g).await? {
            Claim::Claimed { claim_id, .. } => claim_id,
            Claim::Duplicate { result } => {
                return Ok(Outcome::Granted {
                    receipt: result,
                    duplicate: true,
                });
            }
            Claim::FailedPermanent { result } => {
                return Ok(Outcome::FailedPermanent { reason: result });
            }
            Claim::RetryLater { lease_left_ms } => {
                return Ok(Outcome::RetryLater {
                    reason: format!("another worker holds it for {lease_left_ms} ms"),
                });
            }
            Claim::Conflict => return Ok(Outcome::Conflict),
            Claim::BudgetExhausted => return Ok(Outcome::BudgetExhausted),
            Claim::NoBudget => return Ok(Outcome::NoBudget),
        };
        let credited = match self.downstreams.get(&g.reward_type) {
            Some(d) => {
                d.credit(&Credit {
                    trade_no: g.trade_no.clone(),
                    user_id: g.user_id.clone(),
                    reward_type: g.reward_type.clone(),
                    amount: g.amount,
                })
                .await
            }
            None => Err(CreditError {
                code: ErrorCode::Invalid,
                detail: format!("no downstream for reward type {:?}", g.reward_type),
            }),
        };
        match credited {
            Ok(receipt) => Ok(match self.claims.grant(g, &claim_id, &receipt).await? {
                Finish::Done => Outcome::Granted {
                    receipt,
                    duplicate: false,
                },
                Finish::LostLease => Outcome::LeaseLost { receipt },
            }),
            Err(e) if e.code.retryable() => {
                self.claims.release(g, &claim_id).await?;
                Ok(Outcome::RetryLater {
                    reason: e.to_string(),
                })
            }
            Err(e) => {
                let reason = e.to_string();
                if self.claims.fail(g, &claim_id, &reason).await? == Finish::Done {
                    self.archive_failure(g, &e).await?;
                }
                Ok(Outcome::FailedPermanent { reason })
            }
        }
    }

    async fn archive_failure(&self, g: &Grant, e: &CreditError) -> Result<(), GrantError> {
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let record = serde_json::json!({
            "trade_no": g.trade_no,
            "scene": g.scene,
            "user_id": g.user_id,
            "reward_type": g.reward_type,
            "amount": g.amount,
            "code": format!("{:?}", e.code),
            "detail": e.detail,
            "at_ms": at_ms,
        });
        let line = format!("{record}\n");
        let path = self.archive.clone();
        let write_path = path.clone();
        let written = tokio::task::spawn_blocking(move || {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&write_path)?;
            f.write_all(line.as_bytes())?;
            f.sync_data()
        })
        .await
        .unwrap_or_else(|join| Err(std::io::Error::other(join.to_string())));
        written.map_err(|source| GrantError::Archive { path, source })
    }
}
