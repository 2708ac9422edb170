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
//! (refunded and archived), never a silent drop.
//!
//! # After the outcome
//! - **Granted**: the user's token moves out of the pending hash ([`crate::tokens`]).
//! - **Failed for good**: two records, both before the call returns. The failure
//!   archive, a JSON-lines file (one object per failed grant, appended and fsynced),
//!   is the local, always-available copy. The failure topic gets a
//!   [`proto::v1::DeadLetter`] (reason `permanent`) through the SDK's virtual queue,
//!   so it reaches a broker, or the SDK's spool, like any reward event; operators and
//!   the reconciliation read it there. Only the owner of the claim writes them, so a
//!   failure is recorded once however often the trade number comes back.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use prost::Message as _;
use proto::v1::{DeadLetter, RewardEvent, UserInfo};
use sdk::Sdk;

use crate::claim::{Claim, ClaimError, Claims, Finish, Grant};
use crate::downstream::{Credit, CreditError, Downstream, ErrorCode};
use crate::tokens::Tokens;

/// Failures that reached the archive but not the failure topic, since start.
static FAILURE_TOPIC_MISSES: AtomicU64 = AtomicU64::new(0);

/// Permanent failures the failure topic did not take (they are in the archive).
pub fn failure_topic_misses() -> u64 {
    FAILURE_TOPIC_MISSES.load(Ordering::Relaxed)
}

/// A reward type with no downstream: a permanent failure (module doc).
fn no_downstream(reward_type: &str) -> CreditError {
    CreditError {
        code: ErrorCode::Invalid,
        detail: format!("no downstream for reward type {reward_type:?}"),
    }
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

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
        /// The downstream's error when a credit failed; `None` when another worker
        /// holds a live lease on the trade number.
        code: Option<ErrorCode>,
        /// A hint for when to try again.
        after_ms: u64,
    },
    /// Never to be credited; its budget was given back.
    FailedPermanent {
        /// Why.
        reason: String,
        /// The downstream's error; `None` when an earlier call recorded the failure.
        code: Option<ErrorCode>,
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

/// Where permanent failures go besides the archive: a virtual queue of the SDK
/// (its topic is the failure topic).
#[derive(Debug, Clone)]
pub struct FailureTopic {
    /// The SDK whose queue carries them.
    pub sdk: Sdk,
    /// The virtual queue's name.
    pub queue: String,
}

/// A claim that settles the grant without a credit (duplicate, conflict, no budget,
/// ...) as its outcome; `Ok` with the claim id when this caller now owns the grant.
pub fn settled(claim: Claim) -> Result<String, Outcome> {
    Err(match claim {
        Claim::Claimed { claim_id, .. } => return Ok(claim_id),
        Claim::Duplicate { result } => Outcome::Granted {
            receipt: result,
            duplicate: true,
        },
        Claim::FailedPermanent { result } => Outcome::FailedPermanent {
            reason: result,
            code: None,
        },
        Claim::RetryLater { lease_left_ms } => Outcome::RetryLater {
            reason: format!("another worker holds it for {lease_left_ms} ms"),
            code: None,
            after_ms: lease_left_ms,
        },
        Claim::Conflict => Outcome::Conflict,
        Claim::BudgetExhausted => Outcome::BudgetExhausted,
        Claim::NoBudget => Outcome::NoBudget,
    })
}

/// Whether a grant settled without a credit moves its token again: a duplicate of a
/// granted reward (see `Granter::repeat_settled`).
fn moves_token_again(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Granted {
            duplicate: true,
            ..
        }
    )
}

/// How long a retryable downstream failure asks the caller to wait.
const RETRY_AFTER_MS: u64 = 1_000;

/// Grants rewards through the claim store and the configured downstreams.
#[derive(Debug, Clone)]
pub struct Granter {
    claims: Claims,
    downstreams: Arc<HashMap<String, Arc<dyn Downstream>>>,
    archive: PathBuf,
    tokens: Option<Tokens>,
    failures: Option<FailureTopic>,
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
            tokens: None,
            failures: None,
        }
    }

    /// Moves each credited reward's token out of the user's pending hash.
    pub fn with_tokens(mut self, tokens: Tokens) -> Self {
        self.tokens = Some(tokens);
        self
    }

    /// Sends each permanent failure to the failure topic as well as the archive.
    pub fn with_failure_topic(mut self, topic: FailureTopic) -> Self {
        self.failures = Some(topic);
        self
    }

    /// The claim store.
    pub fn claims(&self) -> &Claims {
        &self.claims
    }

    /// Grants `g` (see the module doc for every path).
    pub async fn grant(&self, g: &Grant) -> Result<Outcome, GrantError> {
        let claim_id = match settled(self.claims.claim(g).await?) {
            Ok(claim_id) => claim_id,
            Err(outcome) => return Ok(self.repeat_settled(g, outcome).await),
        };
        match self.credit(g).await {
            Ok(receipt) => {
                let finish = self.claims.grant(g, &claim_id, &receipt).await?;
                Ok(self.granted(g, finish, receipt).await)
            }
            Err(e) => self.not_credited(g, &claim_id, e).await,
        }
    }

    /// Grants many: each exactly as [`Granter::grant`] would, but the claims and the
    /// final `GRANTED` marks go to Redis as one script call per budget shard
    /// ([`Claims::claim_many`], [`Claims::grant_many`]) instead of one per grant, and
    /// the tokens of the credited (and duplicate) grants move together
    /// ([`Tokens::credited_many`]). Downstream credits run concurrently. Answers in
    /// the order of `grants`.
    pub async fn grant_many(&self, grants: &[Grant]) -> Vec<Result<Outcome, GrantError>> {
        let mut out: Vec<Option<Result<Outcome, GrantError>>> =
            (0..grants.len()).map(|_| None).collect();
        // Grants whose token leaves the pending hash: credited now, or duplicates
        // (see `repeat_settled`).
        let mut moves: Vec<usize> = Vec::new();
        // The claimed grants, by reward type: each type's downstream gets its credits
        // in one `credit_many` call (the ledger sends them in one pipeline).
        let mut claimed: HashMap<&str, Vec<(usize, String)>> = HashMap::new();
        for (i, (g, c)) in grants
            .iter()
            .zip(self.claims.claim_many(grants).await)
            .enumerate()
        {
            match c.map(settled) {
                Err(e) => out[i] = Some(Err(e.into())),
                Ok(Err(outcome)) => {
                    if moves_token_again(&outcome) {
                        moves.push(i);
                    }
                    out[i] = Some(Ok(outcome));
                }
                Ok(Ok(claim_id)) => claimed
                    .entry(g.reward_type.as_str())
                    .or_default()
                    .push((i, claim_id)),
            }
        }
        let answers = futures_util::future::join_all(
            claimed
                .into_iter()
                .map(|(reward_type, list)| self.credit_type(grants, reward_type, list)),
        )
        .await;
        let mut credited = Vec::new();
        let mut failed = tokio::task::JoinSet::new();
        for (i, claim_id, r) in answers.into_iter().flatten() {
            match r {
                Ok(receipt) => credited.push((i, claim_id, receipt)),
                Err(e) => {
                    let (me, g) = (self.clone(), grants[i].clone());
                    failed.spawn(async move { (i, me.not_credited(&g, &claim_id, e).await) });
                }
            }
        }
        let items: Vec<(Grant, String, String)> = credited
            .iter()
            .map(|(i, id, receipt)| (grants[*i].clone(), id.clone(), receipt.clone()))
            .collect();
        let finished = self.claims.grant_many(&items).await;
        for ((i, _, receipt), f) in credited.into_iter().zip(finished) {
            out[i] = Some(match f {
                Err(e) => Err(e.into()),
                Ok(Finish::Done) => {
                    moves.push(i);
                    Ok(Outcome::Granted {
                        receipt,
                        duplicate: false,
                    })
                }
                Ok(Finish::LostLease) => Ok(Outcome::LeaseLost { receipt }),
            });
        }
        if let Some(t) = &self.tokens {
            let list: Vec<crate::tokens::Move<'_>> = moves
                .iter()
                .map(|&i| {
                    let g = &grants[i];
                    (
                        g.user_id.as_str(),
                        g.activity_id.as_str(),
                        g.trade_no.as_str(),
                    )
                })
                .collect();
            t.credited_many(&list).await;
        }
        while let Some(joined) = failed.join_next().await {
            if let Ok((i, r)) = joined
                && let Some(slot) = out.get_mut(i)
            {
                *slot = Some(r);
            }
        }
        out.into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    Err(GrantError::Claim(ClaimError::Redis(
                        "a grant task ended without an answer".into(),
                    )))
                })
            })
            .collect()
    }

    /// A grant settled without a credit. For a duplicate, the token is moved out of
    /// the pending hash again: a client that repeats a request after its reward was
    /// credited makes the SDK store the token once more, and without this move it
    /// would sit in the pending hash for good (the replay's reconciliation found
    /// exactly that). The move is idempotent and duplicates are rare.
    async fn repeat_settled(&self, g: &Grant, outcome: Outcome) -> Outcome {
        if let Some(t) = &self.tokens
            && moves_token_again(&outcome)
        {
            t.credited(&g.user_id, &g.activity_id, &g.trade_no).await;
        }
        outcome
    }

    /// Credits the claimed grants `list` (index into `grants`, claim id) of one reward
    /// type through its downstream, in one `credit_many` call.
    async fn credit_type(
        &self,
        grants: &[Grant],
        reward_type: &str,
        list: Vec<(usize, String)>,
    ) -> Vec<(usize, String, Result<String, CreditError>)> {
        let Some(d) = self.downstreams.get(reward_type) else {
            return list
                .into_iter()
                .map(|(i, claim_id)| (i, claim_id, Err(no_downstream(reward_type))))
                .collect();
        };
        let credits: Vec<Credit> = list
            .iter()
            .map(|(i, _)| Credit::from(&grants[*i]))
            .collect();
        let answers = d.credit_many(&credits).await;
        let mut answers = answers.into_iter();
        list.into_iter()
            .map(|(i, claim_id)| {
                let r = answers.next().unwrap_or_else(|| {
                    Err(CreditError {
                        code: ErrorCode::Unavailable,
                        detail: "downstream answered fewer credits than it was sent".into(),
                    })
                });
                (i, claim_id, r)
            })
            .collect()
    }

    /// Credits `g` downstream.
    async fn credit(&self, g: &Grant) -> Result<String, CreditError> {
        match self.downstreams.get(&g.reward_type) {
            Some(d) => d.credit(&Credit::from(g)).await,
            None => Err(no_downstream(&g.reward_type)),
        }
    }

    /// After the record says `GRANTED` (or another worker took it over).
    async fn granted(&self, g: &Grant, finish: Finish, receipt: String) -> Outcome {
        match finish {
            Finish::Done => {
                if let Some(t) = &self.tokens {
                    t.credited(&g.user_id, &g.activity_id, &g.trade_no).await;
                }
                Outcome::Granted {
                    receipt,
                    duplicate: false,
                }
            }
            Finish::LostLease => Outcome::LeaseLost { receipt },
        }
    }

    /// A credit failed: release the claim for a retry, or fail it for good (archive
    /// and failure topic, once, by the owner).
    async fn not_credited(
        &self,
        g: &Grant,
        claim_id: &str,
        e: CreditError,
    ) -> Result<Outcome, GrantError> {
        if e.code.retryable() {
            self.claims.release(g, claim_id).await?;
            return Ok(Outcome::RetryLater {
                reason: e.to_string(),
                code: Some(e.code),
                after_ms: RETRY_AFTER_MS,
            });
        }
        let reason = e.to_string();
        if self.claims.fail(g, claim_id, &reason).await? == Finish::Done {
            self.archive_failure(g, &e).await?;
            self.publish_failure(g, &e).await;
        }
        Ok(Outcome::FailedPermanent {
            reason,
            code: Some(e.code),
        })
    }

    /// Sends the failure to the failure topic. The SDK's queue takes it unless it is
    /// closing or full past its wait; then the archive (already written) is the record
    /// and the miss is logged and counted.
    async fn publish_failure(&self, g: &Grant, e: &CreditError) {
        let Some(topic) = &self.failures else {
            return;
        };
        let letter = DeadLetter {
            event: Some(RewardEvent {
                trade_no: g.trade_no.clone(),
                user: Some(UserInfo {
                    user_id: g.user_id.clone(),
                    ..Default::default()
                }),
                activity_id: g.activity_id.clone(),
                scene_id: g.scene.clone(),
                reward_type: g.reward_type.clone(),
                amount: g.amount,
                ..Default::default()
            }),
            raw: Vec::new(),
            reason: "permanent".into(),
            error_code: e.code.as_str().into(),
            source_topic: String::new(),
            dead_at_ms: now_ms(),
        };
        let sent = topic
            .sdk
            .enqueue(
                Some(&topic.queue),
                None,
                &g.user_id,
                g.trade_no.clone(),
                Bytes::from(letter.encode_to_vec()),
            )
            .await;
        if let Err(err) = sent {
            FAILURE_TOPIC_MISSES.fetch_add(1, Ordering::Relaxed);
            tracing::error!(trade_no = %g.trade_no, error = %err, "failure not sent to the failure topic; it is in the archive");
        }
    }

    async fn archive_failure(&self, g: &Grant, e: &CreditError) -> Result<(), GrantError> {
        let at_ms = now_ms();
        let record = serde_json::json!({
            "trade_no": g.trade_no,
            "scene": g.scene,
            "user_id": g.user_id,
            "reward_type": g.reward_type,
            "amount": g.amount,
            "activity_id": g.activity_id,
            "code": e.code.as_str(),
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
