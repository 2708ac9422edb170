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

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message as _;
use proto::v1::{GrantOutcome, GrantResult, RewardEvent, RewardToken, TokenValidity};
use reward_runtime::clock::now_ms;
use sdk::Sdk;

use crate::claim::{ClaimError, ClaimState, Grant};
use crate::grant::{GrantError, Granter, Outcome};
use crate::tokens::Tokens;
use proto::ids;

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

fn result(trade_no: &str, outcome: GrantOutcome) -> GrantResult {
    GrantResult {
        trade_no: trade_no.to_string(),
        outcome: outcome as i32,
        ..Default::default()
    }
}

fn failed(trade_no: &str, outcome: GrantOutcome, code: &str, message: String) -> GrantResult {
    GrantResult {
        error_code: code.into(),
        message,
        ..result(trade_no, outcome)
    }
}

/// Counts grant results by API and outcome (`reward_service_grants_total`).
pub fn count_outcomes(api: &'static str, results: &[GrantResult]) {
    for r in results {
        let outcome = GrantOutcome::try_from(r.outcome).map_or("UNKNOWN", |o| o.as_str_name());
        metrics::counter!("reward_service_grants_total", "api" => api, "outcome" => outcome)
            .increment(1);
    }
}

/// The wire result of a grant.
pub fn result_of(trade_no: &str, r: Result<Outcome, GrantError>) -> GrantResult {
    match r {
        Ok(Outcome::Granted { receipt, duplicate }) => GrantResult {
            downstream_ref: receipt,
            ..result(
                trade_no,
                if duplicate {
                    GrantOutcome::Duplicate
                } else {
                    GrantOutcome::Granted
                },
            )
        },
        Ok(Outcome::LeaseLost { receipt }) => GrantResult {
            downstream_ref: receipt,
            error_code: "LEASE_LOST".into(),
            message: "credited after the claim's lease expired; another worker owns the \
                      record and calls the downstream with the same idempotency key"
                .into(),
            ..result(trade_no, GrantOutcome::Granted)
        },
        Ok(Outcome::RetryLater {
            reason,
            code,
            after_ms,
        }) => {
            let (outcome, code) = match code {
                Some(c) => (GrantOutcome::FailedRetryable, c.as_str()),
                None => (GrantOutcome::RetryLater, "LEASE_HELD"),
            };
            GrantResult {
                retry_after_ms: i64::try_from(after_ms).unwrap_or(i64::MAX),
                ..failed(trade_no, outcome, code, reason)
            }
        }
        Ok(Outcome::InDoubt { reason }) => {
            failed(trade_no, GrantOutcome::InDoubt, "IN_DOUBT", reason)
        }
        Ok(Outcome::FailedPermanent { reason, code }) => failed(
            trade_no,
            GrantOutcome::FailedPermanent,
            code.map_or("FAILED_BEFORE", |c| c.as_str()),
            reason,
        ),
        Ok(Outcome::Conflict) => failed(
            trade_no,
            GrantOutcome::Conflict,
            "CONFLICT",
            "the trade number is known with another user, type or amount".into(),
        ),
        Ok(Outcome::BudgetExhausted) => failed(
            trade_no,
            GrantOutcome::BudgetExhausted,
            "BUDGET_EXHAUSTED",
            "no room left in this trade number's budget shard".into(),
        ),
        Ok(Outcome::NoBudget) => failed(
            trade_no,
            GrantOutcome::BudgetExhausted,
            "NO_BUDGET",
            "the scene has no budget".into(),
        ),
        Err(GrantError::Claim(ClaimError::Invalid(why))) => {
            failed(trade_no, GrantOutcome::Invalid, "INVALID", why.to_string())
        }
        Err(e @ GrantError::Claim(_)) => GrantResult {
            retry_after_ms: 1_000,
            ..failed(
                trade_no,
                GrantOutcome::FailedRetryable,
                "STORE_UNAVAILABLE",
                e.to_string(),
            )
        },
        // The grant is marked failed and refunded; only its archive line is missing.
        Err(e @ GrantError::Archive { .. }) => failed(
            trade_no,
            GrantOutcome::FailedPermanent,
            "ARCHIVE_FAILED",
            e.to_string(),
        ),
    }
}

/// One checked token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Legal, unknown or illegal.
    pub validity: TokenValidity,
    /// The opened token (absent when illegal).
    pub token: Option<RewardToken>,
    /// Whether its trade number is credited.
    pub credited: bool,
    /// The stored receipt when credited.
    pub receipt: Option<String>,
    /// Why it is illegal.
    pub reason: Option<String>,
}

/// What the wallet page shows for a user in an activity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rewards {
    /// Legal, not yet credited.
    pub pending: Vec<RewardToken>,
    /// Credited.
    pub credited: Vec<RewardToken>,
    /// Kept by the client, opening, but unknown to the server.
    pub unknown: Vec<RewardToken>,
    /// Kept by the client, not opening.
    pub illegal: usize,
    /// Stored tokens that no longer open with the current key ring (rotated out), or
    /// whose ids no grant could carry.
    pub unreadable: usize,
    /// Uncredited tokens past their expiry (or older than records are kept): never
    /// credited, not shown as money.
    pub expired: usize,
    /// Per reward type: (pending, credited) amounts.
    pub balance: BTreeMap<String, (i64, i64)>,
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

    /// Checks one token presented for `user_id` in `activity_id`.
    pub async fn check(
        &self,
        user_id: &str,
        activity_id: &str,
        sealed: &str,
    ) -> Result<Checked, ServiceError> {
        let token = match self.sdk.codec().open(sealed, user_id, activity_id) {
            Ok(t) => t,
            Err(e) => {
                return Ok(Checked {
                    validity: TokenValidity::Illegal,
                    token: None,
                    credited: false,
                    receipt: None,
                    reason: Some(e.to_string()),
                });
            }
        };
        if let Err(why) = ids::check_token(&token).map_err(|(f, p)| format!("{f} {p}")) {
            return Ok(Checked {
                validity: TokenValidity::Illegal,
                token: None,
                credited: false,
                receipt: None,
                reason: Some(why.to_string()),
            });
        }
        let (held, record) = tokio::join!(
            self.tokens.holds(user_id, activity_id, &token.trade_no),
            self.granter.claims().record(&token.trade_no),
        );
        let ((pending, credited_hash), record) = (held?, record?);
        // A record of this trade number for someone else does not make the token legal.
        let record = record.filter(|r| r.user_id == user_id);
        let granted = record.as_ref().filter(|r| r.state == ClaimState::Granted);
        let credited = granted.is_some() || credited_hash;
        let legal = pending || credited_hash || record.is_some();
        let expired = self.expired(&token, now_ms());
        let validity = match (legal, &expired) {
            // A credited token stays legal (its record answers a repeat); an
            // uncredited one past its life is never credited.
            (true, Some(_)) if !credited => TokenValidity::Expired,
            (true, _) => TokenValidity::Legal,
            (false, _) => TokenValidity::Unknown,
        };
        Ok(Checked {
            validity,
            credited,
            receipt: granted.map(|r| r.result.clone()),
            token: Some(token),
            reason: if validity == TokenValidity::Expired {
                expired
            } else {
                None
            },
        })
    }

    /// Why a token may no longer be credited: past its own expiry, or older than the
    /// claim store keeps records (a record that expired could no longer refuse a
    /// second credit).
    fn expired(&self, t: &RewardToken, now_ms: i64) -> Option<String> {
        let retention_ms = i64::try_from(self.granter.claims().config().retention_secs)
            .unwrap_or(i64::MAX)
            .saturating_mul(1000);
        if t.expires_at_ms > 0 && now_ms >= t.expires_at_ms {
            return Some(format!("expired at {} (Unix ms)", t.expires_at_ms));
        }
        if now_ms >= t.grant_time_ms.saturating_add(retention_ms) {
            return Some("older than the service keeps grant records".into());
        }
        None
    }

    /// Force-credits every legal, uncredited token; one entry per token, in order:
    /// the check and, for legal tokens, the grant's result.
    pub async fn withdraw(
        &self,
        user_id: &str,
        activity_id: &str,
        sealed: &[String],
    ) -> Result<Vec<(Checked, Option<GrantResult>)>, ServiceError> {
        let mut out = Vec::with_capacity(sealed.len());
        for s in sealed {
            let c = self.check(user_id, activity_id, s).await?;
            let r = match (&c.validity, &c.token) {
                (TokenValidity::Legal, Some(t)) if c.credited => Some(GrantResult {
                    downstream_ref: c.receipt.clone().unwrap_or_default(),
                    ..result(&t.trade_no, GrantOutcome::Duplicate)
                }),
                (TokenValidity::Legal, Some(t)) => Some(self.grant(&event_of(t)).await),
                _ => None,
            };
            out.push((c, r));
        }
        Ok(out)
    }

    /// The wallet page of a user in an activity: stored tokens, plus the ones the
    /// client kept (checked one by one), merged by trade number.
    pub async fn rewards(
        &self,
        user_id: &str,
        activity_id: &str,
        kept: &[String],
    ) -> Result<Rewards, ServiceError> {
        let held = self.tokens.held(user_id, activity_id).await?;
        let codec = self.sdk.codec();
        let mut out = Rewards::default();
        let mut seen = std::collections::HashSet::new();
        for (map, credited) in [(&held.pending, false), (&held.credited, true)] {
            for sealed in map.values() {
                match codec.open(sealed, user_id, activity_id) {
                    // A stored token whose ids the service cannot key (written by an
                    // older SDK) is counted, never allowed to fail the page.
                    Ok(t) if ids::check_token(&t).is_err() => out.unreadable += 1,
                    Ok(t) if seen.insert(t.trade_no.clone()) => {
                        if credited {
                            out.credited.push(t);
                        } else {
                            out.pending.push(t);
                        }
                    }
                    Ok(_) => {}
                    Err(_) => out.unreadable += 1,
                }
            }
        }
        for sealed in kept {
            let c = self.check(user_id, activity_id, sealed).await?;
            let Some(t) = c.token else {
                out.illegal += 1;
                continue;
            };
            if !seen.insert(t.trade_no.clone()) {
                continue;
            }
            match c.validity {
                TokenValidity::Legal if c.credited => out.credited.push(t),
                TokenValidity::Legal => out.pending.push(t),
                TokenValidity::Expired => out.expired += 1,
                _ => out.unknown.push(t),
            }
        }
        // A token can sit in the pending hash while its record already says GRANTED
        // (the move after the credit failed): show it as credited.
        let mut still_pending = Vec::with_capacity(out.pending.len());
        let now = now_ms();
        for t in std::mem::take(&mut out.pending) {
            let granted = self
                .granter
                .claims()
                .record(&t.trade_no)
                .await?
                .is_some_and(|r| r.state == ClaimState::Granted && r.user_id == user_id);
            if granted {
                out.credited.push(t);
            } else if self.expired(&t, now).is_some() {
                out.expired += 1;
            } else {
                still_pending.push(t);
            }
        }
        out.pending = still_pending;
        for t in &out.pending {
            out.balance.entry(t.reward_type.clone()).or_default().0 += t.amount;
        }
        for t in &out.credited {
            out.balance.entry(t.reward_type.clone()).or_default().1 += t.amount;
        }
        let by_trade = |a: &RewardToken, b: &RewardToken| a.trade_no.cmp(&b.trade_no);
        out.pending.sort_by(by_trade);
        out.credited.sort_by(by_trade);
        out.unknown.sort_by(by_trade);
        Ok(out)
    }

    /// Whether Redis answers (readiness).
    pub async fn ready(&self) -> Result<(), ServiceError> {
        self.granter.claims().ping().await?;
        Ok(())
    }
}

/// The event a token stands for (what a withdrawal grants).
pub fn event_of(t: &RewardToken) -> RewardEvent {
    RewardEvent {
        trade_no: t.trade_no.clone(),
        user: Some(proto::v1::UserInfo {
            user_id: t.user_id.clone(),
            app_id: t.app_id.clone(),
            ..Default::default()
        }),
        activity_id: t.activity_id.clone(),
        scene_id: t.scene_id.clone(),
        reward_type: t.reward_type.clone(),
        amount: t.amount,
        created_at_ms: t.grant_time_ms,
        description: t.description.clone(),
        ..Default::default()
    }
}
