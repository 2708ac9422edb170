//! What both APIs do, independent of their wire: grants (sync, async, batch) and the
//! wallet's token checks.
//!
//! # Sync, async and batch grants
//! - **Grant**: claim, credit, finish ([`crate::grant`]); the answer is the
//!   downstream's.
//! - **GrantAsync**: the claim (idempotency and budget) runs now; on success the claim's
//!   lease is released at once and the event goes to the SDK's virtual queue, routed by
//!   its reward type like any reward, and the answer is `ACCEPTED`. The record stays
//!   `IN_PROGRESS` with no live lease, so the consumer that later calls `GrantBatch`
//!   for the event takes it over without a second deduction and credits it. A repeated
//!   GrantAsync before that takes it over too and queues the event again; the second
//!   delivery then finds `GRANTED` (`DUPLICATE`). If the queue refuses (closing, or
//!   full past its wait), the answer is `RETRY_LATER`: the deduction stands and the
//!   caller's retry takes the claim over.
//! - **GrantBatch**: each event as in Grant, all of them at once, answered in request
//!   order. The claims, and the final `GRANTED` marks, go to Redis as one script call
//!   per budget shard rather than one per event (`Granter::grant_many`); the ledger
//!   credits and token moves stay one per event (they live in the user's slot).
//!
//! # Budget scope
//! A grant's budget is its event's `activity_id/scene_id` ([`scope`]).
//!
//! # Wallet checks
//! A token presented by a client is checked against the user and activity it is
//! presented for (they are its AEAD binding, so another user's token does not open):
//! - `ILLEGAL`: does not open (bad base64, unknown key, forged, another user's or
//!   activity's);
//! - `LEGAL`: opens, and the server knows the trade number: the token is in the user's
//!   pending or credited hash, or the claim store has its record. `credited` is true
//!   when the record says `GRANTED`;
//! - `UNKNOWN`: opens, but the server holds nothing of it (its token write failed and no
//!   grant has started yet, or every record of it expired). Never credited from the
//!   wallet: the event, if it exists, is still on its way through the queue.
//!
//! Withdrawal grants every `LEGAL`, uncredited token at once, synchronously, with the
//! token's own fields (the token is authentic: only the key holder can seal one).

use std::sync::Arc;

use bytes::Bytes;
use prost::Message as _;
use proto::v1::{GrantOutcome, GrantResult, RewardEvent};
use reward_runtime::clock::now_ms;
use sdk::Sdk;

use crate::claim::{ClaimError, Grant};
use crate::grant::{GrantError, Granter};
use crate::tokens::Tokens;
use proto::ids;

mod results;
mod wallet;

pub use self::results::{count_outcomes, result_of};
pub use self::wallet::{Checked, Rewards, event_of};

use self::results::{failed, result};

/// The budget scope of an activity's scene.
pub fn scope(activity_id: &str, scene_id: &str) -> String {
    format!("{activity_id}/{scene_id}")
}

/// Checks an event and turns it into a grant; the error is the reason for `INVALID`.
/// Ids follow the pipeline's one rule (`proto::ids`), the same the SDK applies.
pub fn grant_of(ev: &RewardEvent) -> Result<Grant, String> {
    let user_id = ev.user.as_ref().map(|u| u.user_id.as_str()).unwrap_or("");
    ids::check_event(ev).map_err(|(field, p)| format!("{field} {p}"))?;
    if ev.amount <= 0 {
        return Err(format!("amount must be positive, not {}", ev.amount));
    }
    Ok(Grant {
        scene: scope(&ev.activity_id, &ev.scene_id),
        activity_id: ev.activity_id.clone(),
        trade_no: ev.trade_no.clone(),
        user_id: user_id.to_string(),
        reward_type: ev.reward_type.clone(),
        amount: ev.amount,
    })
}

/// Service failures the APIs turn into errors (not per-grant outcomes).
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Redis failed while reading tokens or records.
    #[error("store unavailable: {0}")]
    Store(String),
    /// The request is malformed.
    #[error("{0}")]
    Invalid(String),
}

impl From<fred::error::Error> for ServiceError {
    fn from(e: fred::error::Error) -> Self {
        ServiceError::Store(e.to_string())
    }
}

impl From<ClaimError> for ServiceError {
    fn from(e: ClaimError) -> Self {
        match e {
            ClaimError::Invalid(why) => ServiceError::Invalid(why.into()),
            other => ServiceError::Store(other.to_string()),
        }
    }
}

/// The service: cheap to clone.
#[derive(Debug, Clone)]
pub struct Service {
    granter: Granter,
    tokens: Tokens,
    sdk: Sdk,
    inner: Arc<Limits>,
}

#[derive(Debug)]
struct Limits {
    max_batch: usize,
}

impl Service {
    /// A service over a granter (which should carry `tokens`), the token store and the
    /// SDK (codec and virtual queue).
    pub fn new(granter: Granter, tokens: Tokens, sdk: Sdk, max_batch: usize) -> Self {
        Self {
            granter,
            tokens,
            sdk,
            inner: Arc::new(Limits { max_batch }),
        }
    }

    /// The SDK in use.
    pub fn sdk(&self) -> &Sdk {
        &self.sdk
    }

    /// The token store's service side (moves, reads).
    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    /// The granter in use.
    pub fn granter(&self) -> &Granter {
        &self.granter
    }

    /// Most events per batch.
    pub fn max_batch(&self) -> usize {
        self.inner.max_batch
    }

    /// [`grant_of`], the type's amount ceiling, and the event's age: an event older
    /// than the claim store keeps records (a topic replayed, a consumer far behind)
    /// could find its record gone and be credited again, so it is refused.
    fn checked(&self, ev: &RewardEvent) -> Result<Grant, String> {
        let g = grant_of(ev)?;
        self.granter.check_ceiling(&g)?;
        let retention_ms = i64::try_from(self.granter.claims().config().retention_secs)
            .unwrap_or(i64::MAX)
            .saturating_mul(1000);
        if ev.created_at_ms > 0 && now_ms() >= ev.created_at_ms.saturating_add(retention_ms) {
            return Err(format!(
                "the event was created at {} (Unix ms), longer ago than grant records are kept",
                ev.created_at_ms
            ));
        }
        Ok(g)
    }

    /// Grants one event now.
    pub async fn grant(&self, ev: &RewardEvent) -> GrantResult {
        match self.checked(ev) {
            Ok(g) => result_of(&g.trade_no, self.granter.grant(&g).await),
            Err(why) => failed(&ev.trade_no, GrantOutcome::Invalid, "INVALID", why),
        }
    }

    /// Claims now, credits later through the queue (see the module doc).
    pub async fn grant_async(&self, ev: &RewardEvent) -> GrantResult {
        let g = match self.checked(ev) {
            Ok(g) => g,
            Err(why) => return failed(&ev.trade_no, GrantOutcome::Invalid, "INVALID", why),
        };
        let claims = self.granter.claims();
        let (claim_id, prior) = match claims.claim(&g).await.map(crate::grant::settled) {
            Ok(Ok(claimed)) => claimed,
            Ok(Err(outcome)) => return result_of(&g.trade_no, Ok(outcome)),
            Err(e) => return result_of(&g.trade_no, Err(GrantError::Claim(e))),
        };
        // An earlier owner may have credited: keep that doubt for the consumer's
        // GrantBatch to resolve, never release it as clean.
        let released = if prior.needs_resolving() {
            claims.doubt(&g, &claim_id, 0).await
        } else {
            claims.release(&g, &claim_id).await
        };
        if let Err(e) = released {
            return result_of(&g.trade_no, Err(GrantError::Claim(e)));
        }
        let payload = Bytes::from(ev.encode_to_vec());
        match self
            .sdk
            .enqueue(
                None,
                Some(&g.reward_type),
                &g.user_id,
                g.trade_no.clone(),
                payload,
            )
            .await
        {
            Ok(_) => result(&g.trade_no, GrantOutcome::Accepted),
            Err(e) => GrantResult {
                retry_after_ms: 1_000,
                ..failed(
                    &g.trade_no,
                    GrantOutcome::RetryLater,
                    "QUEUE_REFUSED",
                    format!("budget held, event not queued: {e}"),
                )
            },
        }
    }

    /// Grants every event at once; results in request order.
    pub async fn grant_batch(&self, events: Vec<RewardEvent>) -> Vec<GrantResult> {
        // Invalid events are answered at once; the rest go to the granter together.
        let mut out: Vec<Option<GrantResult>> = vec![None; events.len()];
        let mut grants = Vec::with_capacity(events.len());
        let mut at = Vec::with_capacity(events.len());
        for (i, ev) in events.iter().enumerate() {
            match self.checked(ev) {
                Ok(g) => {
                    grants.push(g);
                    at.push(i);
                }
                Err(why) => {
                    out[i] = Some(failed(&ev.trade_no, GrantOutcome::Invalid, "INVALID", why));
                }
            }
        }
        let results = self.granter.grant_many(&grants).await;
        for ((i, g), r) in at.into_iter().zip(&grants).zip(results) {
            out[i] = Some(result_of(&g.trade_no, r));
        }
        out.into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    failed(
                        "",
                        GrantOutcome::FailedRetryable,
                        "INTERNAL",
                        "the grant ended without an answer; send it again".into(),
                    )
                })
            })
            .collect()
    }

    /// Whether Redis answers (readiness).
    pub async fn ready(&self) -> Result<(), ServiceError> {
        self.granter.claims().ping().await?;
        Ok(())
    }
}
