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
//!   per batch (per budget shard on a Redis Cluster) rather than one per event
//!   (`Granter::grant_many`); the credits go as one call per reward type, and the
//!   token moves as one call per batch (per slot on a cluster).
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
//!   hash (pending or credited), or the claim store has its record. `credited` is true
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
use sdk::token::proof::ProofError;

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
/// Every field follows the pipeline's one set of limits (`proto::limits`, ids by
/// `proto::ids`), the same the SDK applies.
pub fn grant_of(ev: &RewardEvent) -> Result<Grant, String> {
    let user_id = ev.user.as_ref().map(|u| u.user_id.as_str()).unwrap_or("");
    proto::limits::check_event(ev).map_err(|e| e.to_string())?;
    Ok(Grant {
        scene: scope(&ev.activity_id, &ev.scene_id),
        activity_id: ev.activity_id.clone(),
        trade_no: ev.trade_no.clone(),
        user_id: user_id.to_string(),
        reward_type: ev.reward_type.clone(),
        amount: ev.amount,
    })
}

/// The `[events]` section: what `GrantBatch` with `require_proof` (a consumer's call)
/// does with an event that carries no proof.
///
/// ```toml
/// [events]
/// unproven = "refuse"                              # the default
/// # During a rollout from SDKs that did not sign yet:
/// # unproven = "accept"
/// # accept_unproven_until = "2027-01-20T00:00:00Z"   # UTC, at most 30 days ahead
/// ```
///
/// `accept` credits events without a proof, each counted
/// (`reward_service_events_unproven_accepted_total`), and only until
/// `accept_unproven_until`: from then on they are refused as under `refuse`, without a
/// restart. There is no way to accept them for good. While the window is open, *any*
/// event without a proof is credited, a stranger's included (within budgets and
/// ceilings): open it only for the rollout. An event whose proof is present but wrong
/// (another key, other fields) is refused in both modes, and so is an expired one.
///
/// Rollout order for a running fleet: (1) services, with an `accept` window; (2)
/// consumers (an older consumer that parks an event re-encodes it without the fields
/// it does not know, its proof among them); (3) SDKs; (4) let the window end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventsConfig {
    /// Until when (Unix ms) events without a proof are credited; `None`: never.
    pub accept_unproven_until_ms: Option<i64>,
}

/// The longest an `accept` window may reach ahead of the start-up (30 days): past the
/// retention of any topic an unsigned event could still sit in.
pub const MAX_ACCEPT_WINDOW_MS: i64 = 30 * 24 * 3_600_000;

/// Whether a batch's events must prove they were issued by a key holder
/// ([`sdk::token::proof`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proofs {
    /// Events read off a topic (`GrantBatchRequest.require_proof`): each must carry a
    /// valid proof (within an `accept` window of `[events]`, one without a proof
    /// passes and is counted).
    Required,
    /// Events the caller vouches for: a grant credential holder's own, or the
    /// service's (the sweeper's and the wallet's, rebuilt from tokens it opened).
    Vouched,
}

/// Why an event is refused before any claim: the error code and the message of its
/// `INVALID` result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `INVALID`, `EXPIRED` or a `PROOF_*` code.
    pub code: &'static str,
    /// For logs and operators.
    pub why: String,
}

impl Refusal {
    fn invalid(why: String) -> Self {
        Self {
            code: "INVALID",
            why,
        }
    }

    fn result(self, trade_no: &str) -> GrantResult {
        failed(trade_no, GrantOutcome::Invalid, self.code, self.why)
    }
}

/// Error codes of events refused before any claim for their proof, their expiry or
/// their undeclared reward type: the label values of
/// `reward_service_events_refused_total{code}` (registered at 0 at start).
pub use reward_runtime::catalogue::REFUSAL_CODES;

/// Whether the reward is past its own expiry at `now_ms`.
pub fn expired(expires_at_ms: i64, now_ms: i64) -> bool {
    expires_at_ms > 0 && now_ms >= expires_at_ms
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
    events: EventsConfig,
}

impl Service {
    /// A service over a granter (which should carry `tokens`), the token store and the
    /// SDK (codec and virtual queue); unproven events are refused.
    pub fn new(granter: Granter, tokens: Tokens, sdk: Sdk, max_batch: usize) -> Self {
        Self {
            granter,
            tokens,
            sdk,
            inner: Arc::new(Limits {
                max_batch,
                events: EventsConfig::default(),
            }),
        }
    }

    /// This service with `[events]` settings (what it does with unproven events).
    pub fn with_events(self, events: EventsConfig) -> Self {
        let max_batch = self.inner.max_batch;
        Self {
            inner: Arc::new(Limits { max_batch, events }),
            ..self
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

    /// Whether `ev` proves itself as `proofs` asks; `Ok` also for an unproven event
    /// inside an `accept` window (counted).
    fn proven(&self, ev: &RewardEvent, proofs: Proofs, now: i64) -> Result<(), Refusal> {
        if proofs == Proofs::Vouched {
            return Ok(());
        }
        match self.sdk.codec().proofs().verify(ev) {
            Ok(_) => Ok(()),
            Err(ProofError::Missing)
                if self
                    .inner
                    .events
                    .accept_unproven_until_ms
                    .is_some_and(|until| now < until) =>
            {
                metrics::counter!("reward_service_events_unproven_accepted_total").increment(1);
                Ok(())
            }
            Err(e) => Err(Refusal {
                code: e.as_code(),
                why: e.to_string(),
            }),
        }
    }

    /// The checks before any claim that need no Redis, in order: the limits
    /// ([`grant_of`]), the proof (when `proofs` asks), the type's amount ceiling, and
    /// the event's age: an event older than the claim store keeps records (a topic
    /// replayed, a consumer far behind) could find its record gone and be credited
    /// again, so it is refused. The reward's expiry and its type's downstream are [`Service::admitted`]'s.
    fn checked(&self, ev: &RewardEvent, proofs: Proofs) -> Result<Grant, Refusal> {
        let g = grant_of(ev).map_err(Refusal::invalid)?;
        let now = now_ms();
        self.proven(ev, proofs, now).inspect_err(|r| {
            metrics::counter!("reward_service_events_refused_total", "code" => r.code).increment(1);
        })?;
        proto::limits::check_created(ev, now).map_err(|e| Refusal::invalid(e.to_string()))?;
        self.granter.check_ceiling(&g).map_err(Refusal::invalid)?;
        let retention_ms = i64::try_from(self.granter.claims().config().retention_secs)
            .unwrap_or(i64::MAX)
            .saturating_mul(1000);
        if now >= ev.created_at_ms.saturating_add(retention_ms) {
            return Err(Refusal::invalid(format!(
                "the event was created at {} (Unix ms), longer ago than grant records are kept",
                ev.created_at_ms
            )));
        }
        Ok(g)
    }

    /// `None` when the reward may go on. A reward past its expiry, or of a reward type
    /// no downstream is configured for, starts nothing: it is refused (`EXPIRED`,
    /// `UNKNOWN_REWARD_TYPE`) with no record written, so its trade number stays free
    /// and the corrected request (or the same one once the type is configured) is
    /// credited. Either goes on when its trade number was already claimed (a claim
    /// made while it was valid is finished whatever changed since: its budget is taken
    /// and a credit may have happened; the granter holds a claimed grant whose type
    /// lost its downstream for an operator). Otherwise the answer: the refusal, or a
    /// store failure.
    async fn admitted(&self, g: &Grant, expires_at_ms: i64) -> Option<GrantResult> {
        let refusal = if expired(expires_at_ms, now_ms()) {
            Refusal {
                code: "EXPIRED",
                why: format!("the reward expired at {expires_at_ms} (Unix ms)"),
            }
        } else if !self.granter.knows_type(&g.reward_type) {
            Refusal {
                code: "UNKNOWN_REWARD_TYPE",
                why: format!(
                    "no downstream is configured for reward type {:?}; nothing was recorded: send it again with a configured type",
                    g.reward_type
                ),
            }
        } else {
            return None;
        };
        match self.granter.claims().record(&g.trade_no).await {
            Ok(Some(_)) => None,
            Ok(None) => {
                metrics::counter!("reward_service_events_refused_total", "code" => refusal.code)
                    .increment(1);
                Some(refusal.result(&g.trade_no))
            }
            Err(e) => Some(result_of(&g.trade_no, Err(GrantError::Claim(e)))),
        }
    }

    /// Grants one event now.
    pub async fn grant(&self, ev: &RewardEvent) -> GrantResult {
        match self.checked(ev, Proofs::Vouched) {
            Ok(g) => match self.admitted(&g, ev.expires_at_ms).await {
                None => result_of(&g.trade_no, self.granter.grant(&g).await),
                Some(answer) => answer,
            },
            Err(r) => r.result(&ev.trade_no),
        }
    }

    /// Claims now, credits later through the queue (see the module doc). The queued
    /// event is signed by this service, so the consumer's `GrantBatch` takes it.
    pub async fn grant_async(&self, ev: &RewardEvent) -> GrantResult {
        let g = match self.checked(ev, Proofs::Vouched) {
            Ok(g) => g,
            Err(r) => return r.result(&ev.trade_no),
        };
        if let Some(answer) = self.admitted(&g, ev.expires_at_ms).await {
            return answer;
        }
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
        let mut queued = ev.clone();
        queued.retry_count = 0;
        queued.not_before_ms = 0;
        self.sdk.codec().proofs().sign(&mut queued);
        let payload = Bytes::from(queued.encode_to_vec());
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

    /// Grants every event at once; results in request order. With
    /// [`Proofs::Required`] an event without a valid proof is answered `INVALID` with
    /// its `PROOF_*` code and never reaches a claim.
    pub async fn grant_batch(&self, events: Vec<RewardEvent>, proofs: Proofs) -> Vec<GrantResult> {
        // Invalid events are answered at once; the rest go to the granter together.
        let mut out: Vec<Option<GrantResult>> = vec![None; events.len()];
        let mut grants = Vec::with_capacity(events.len());
        let mut at = Vec::with_capacity(events.len());
        let mut unproven: Option<(&'static str, &str, usize)> = None;
        let mut late = Vec::new(); // expired or undeclared type: admitted() decides
        let now = now_ms();
        for (i, ev) in events.iter().enumerate() {
            match self.checked(ev, proofs) {
                Ok(g)
                    if expired(ev.expires_at_ms, now)
                        || !self.granter.knows_type(&g.reward_type) =>
                {
                    late.push((i, g));
                }
                Ok(g) => {
                    grants.push(g);
                    at.push(i);
                }
                Err(r) => {
                    if r.code.starts_with("PROOF_") {
                        let seen = unproven.map_or(0, |(_, _, n)| n);
                        let first =
                            unproven.map_or((r.code, ev.trade_no.as_str()), |(c, t, _)| (c, t));
                        unproven = Some((first.0, first.1, seen + 1));
                    }
                    out[i] = Some(r.result(&ev.trade_no));
                }
            }
        }
        // Past their expiry or of an undeclared type: on only if already claimed
        // (rare, so one read each).
        for (i, g) in late {
            match self.admitted(&g, events[i].expires_at_ms).await {
                None => {
                    grants.push(g);
                    at.push(i);
                }
                Some(answer) => out[i] = Some(answer),
            }
        }
        if let Some((code, trade_no, n)) = unproven {
            // One line per batch, whatever a hostile topic holds.
            tracing::warn!(refused = n, first_code = code, first_trade_no = %trade_no,
                "events without a valid proof refused (a record nobody with the token keys issued)");
        }
        // A trade number twice in the batch: one copy per trade number is claimed in a
        // round, the first in request order. A later copy of the same reward answers
        // what that one got (GRANTED as DUPLICATE, with its receipt). A copy that
        // differs is a CONFLICT when the first was credited (the record holds the
        // first's fields); otherwise the record may hold the copy's own fields, or
        // none, so the copy goes to the store in the next round, as a later call would.
        let mut pending: Vec<(usize, Grant)> = at.into_iter().zip(grants).collect();
        pending.sort_by_key(|(i, _)| *i);
        let mut round = 0;
        while !pending.is_empty() {
            round += 1;
            if round > MAX_COPY_ROUNDS {
                for (i, g) in pending.drain(..) {
                    out[i] = Some(GrantResult {
                        retry_after_ms: 100,
                        ..failed(
                            &g.trade_no,
                            GrantOutcome::RetryLater,
                            "REPEATED_IN_BATCH",
                            format!(
                                "more than {MAX_COPY_ROUNDS} different versions of this trade number in one batch; nothing was claimed for this one: send it again"
                            ),
                        )
                    });
                }
                break;
            }
            let (kept, copies) = split_copies(pending);
            let grants: Vec<Grant> = kept.iter().map(|(_, g)| g.clone()).collect();
            let results = self.granter.grant_many(&grants).await;
            for ((i, g), r) in kept.iter().zip(results) {
                out[*i] = Some(result_of(&g.trade_no, r));
            }
            pending = Vec::new();
            for (i, g, first, same) in copies {
                let Some(first) = out[kept[first].0].clone() else {
                    continue;
                };
                match copy_answer(first, same) {
                    Some(answer) => out[i] = Some(answer),
                    None => pending.push((i, g)),
                }
            }
        }
        out.into_iter()
            .enumerate()
            .map(|(i, r)| {
                let mut r = r.unwrap_or_else(|| {
                    failed(
                        &events[i].trade_no,
                        GrantOutcome::FailedRetryable,
                        "INTERNAL",
                        "the grant ended without an answer; send it again".into(),
                    )
                });
                r.index = u32::try_from(i).unwrap_or(u32::MAX);
                r
            })
            .collect()
    }

    /// Whether Redis answers (readiness).
    pub async fn ready(&self) -> Result<(), ServiceError> {
        self.granter.claims().ping().await?;
        Ok(())
    }
}

/// Rounds of claims one `GrantBatch` may take for the versions of one trade number
/// (a version differing from a copy not credited goes to the store in the next round).
const MAX_COPY_ROUNDS: usize = 4;

/// Splits grants (in request order) into the first copy of each trade number and
/// the later copies: (request position, grant, position of the first copy among the
/// kept ones, whether the copy is the same reward: user, type, amount and
/// activity/scene, what a claim record compares).
#[allow(clippy::type_complexity)]
fn split_copies(
    grants: Vec<(usize, Grant)>,
) -> (Vec<(usize, Grant)>, Vec<(usize, Grant, usize, bool)>) {
    let mut first: std::collections::HashMap<String, usize> =
        std::collections::HashMap::with_capacity(grants.len());
    let mut kept: Vec<(usize, Grant)> = Vec::with_capacity(grants.len());
    let mut copies = Vec::new();
    for (i, g) in grants {
        if let Some(&p) = first.get(g.trade_no.as_str()) {
            let f = &kept[p].1;
            let same = f.user_id == g.user_id
                && f.reward_type == g.reward_type
                && f.amount == g.amount
                && f.scene == g.scene;
            copies.push((i, g, p, same));
        } else {
            first.insert(g.trade_no.clone(), kept.len());
            kept.push((i, g));
        }
    }
    (kept, copies)
}

/// The answer to a later copy of a trade number in one batch, from the first copy's;
/// `None` when only the store can answer it (a differing copy whose first copy was
/// not credited: the record may hold the copy's fields, or there may be none).
fn copy_answer(first: GrantResult, same: bool) -> Option<GrantResult> {
    let outcome = GrantOutcome::try_from(first.outcome).ok();
    if !same {
        return match outcome {
            Some(GrantOutcome::Granted | GrantOutcome::Duplicate) => Some(failed(
                &first.trade_no,
                GrantOutcome::Conflict,
                "CONFLICT",
                "the trade number was credited earlier in this batch with another user, type, amount or scene"
                    .into(),
            )),
            _ => None,
        };
    }
    Some(match outcome {
        Some(GrantOutcome::Granted) => GrantResult {
            outcome: GrantOutcome::Duplicate as i32,
            error_code: String::new(),
            message: "granted by its earlier copy in this batch".into(),
            ..first
        },
        _ => first,
    })
}
