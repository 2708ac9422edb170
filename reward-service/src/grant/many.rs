//! Many grants at once: claims and final marks batched (per budget shard on a Redis
//! Cluster), credits sent per reward type in one call each, token moves together,
//! answers in request order.

use std::collections::{HashMap, HashSet};

use tokio::task::JoinSet;

use super::error::GrantError;
use super::granter::{Granter, no_downstream};
use super::outcome::{Outcome, moves_token_again, settled_outcome};
use super::resolve::Resolved;
use crate::claim::{Claim, ClaimError, Finish, Grant, Prior};
use crate::downstream::{Credit, CreditError, ErrorCode};

/// Grants finishing on tasks of their own (a failed credit, or a `GRANTED` mark the
/// batch's mark missed), each with its index into the batch.
type Finishing = JoinSet<(usize, Result<Outcome, GrantError>)>;

/// What one `grant_many` call knows of its grants so far, phase by phase.
struct Batch<'a> {
    /// The grants, in request order.
    grants: &'a [Grant],
    /// Each grant's answer, once it has one.
    out: Vec<Option<Result<Outcome, GrantError>>>,
    /// Grants whose token leaves the pending hash: credited now, or duplicates
    /// (see `repeat_settled`).
    moves: Vec<usize>,
    /// The claimed grants, by reward type: each type's downstream gets its credits
    /// in one `credit_many` call (the ledger sends them in one pipeline).
    claimed: HashMap<&'a str, Vec<(usize, String)>>,
    /// Taken over from an owner that may have credited: resolved one by one first.
    resolve: Vec<(usize, String)>,
    /// Which grants had an earlier attempt to resolve (a permanent error on their
    /// repeat keeps them in doubt rather than failing them).
    resolved_first: HashSet<usize>,
    /// Credited grants (index, claim id, receipt) still to be marked `GRANTED`.
    credited: Vec<(usize, String, String)>,
}

impl<'a> Batch<'a> {
    /// A batch with no answers yet.
    fn new(grants: &'a [Grant]) -> Self {
        Self {
            grants,
            out: (0..grants.len()).map(|_| None).collect(),
            moves: Vec::new(),
            claimed: HashMap::new(),
            resolve: Vec::new(),
            resolved_first: HashSet::new(),
            credited: Vec::new(),
        }
    }

    /// Queues grant `i`, claimed as `claim_id`, for its reward type's credit call.
    fn queue_credit(&mut self, i: usize, claim_id: String) {
        let grants = self.grants;
        self.claimed
            .entry(grants[i].reward_type.as_str())
            .or_default()
            .push((i, claim_id));
    }

    /// Sorts the claims' answers (in the order of the grants): to resolve first, to
    /// credit, or settled without a credit.
    fn sort_claims(&mut self, claims: Vec<Result<Claim, ClaimError>>) {
        for (i, c) in claims.into_iter().enumerate().take(self.grants.len()) {
            match c {
                Err(e) => self.out[i] = Some(Err(e.into())),
                Ok(Claim::Claimed { claim_id, prior }) if prior.needs_resolving() => {
                    self.resolve.push((i, claim_id));
                }
                Ok(Claim::Claimed { claim_id, .. }) => self.queue_credit(i, claim_id),
                Ok(other) => {
                    let outcome = settled_outcome(other);
                    if moves_token_again(&outcome) {
                        self.moves.push(i);
                    }
                    self.out[i] = Some(Ok(outcome));
                }
            }
        }
    }

    /// Waits for the grants finishing on their own tasks, then answers every grant in
    /// request order.
    async fn answers(mut self, mut failed: Finishing) -> Vec<Result<Outcome, GrantError>> {
        while let Some(joined) = failed.join_next().await {
            if let Ok((i, r)) = joined
                && let Some(slot) = self.out.get_mut(i)
            {
                *slot = Some(r);
            }
        }
        self.out
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    Err(GrantError::Claim(ClaimError::Redis(
                        "a grant task ended without an answer".into(),
                    )))
                })
            })
            .collect()
    }
}

impl Granter {
    /// Grants many: each exactly as [`Granter::grant`] would, but the claims and the
    /// final `GRANTED` marks go to Redis as one script call per batch (per budget
    /// shard on a Redis Cluster)
    /// ([`Claims::claim_many`], [`Claims::grant_many`]) instead of one per grant, and
    /// the tokens of the credited (and duplicate) grants move together
    /// ([`Tokens::credited_many`]). Downstream credits run concurrently. Answers in
    /// the order of `grants`.
    ///
    /// [`Claims::claim_many`]: crate::claim::Claims::claim_many
    /// [`Claims::grant_many`]: crate::claim::Claims::grant_many
    /// [`Tokens::credited_many`]: crate::tokens::Tokens::credited_many
    pub async fn grant_many(&self, grants: &[Grant]) -> Vec<Result<Outcome, GrantError>> {
        let mut batch = Batch::new(grants);
        batch.sort_claims(self.claims.claim_many(grants).await);
        self.resolve_taken_over(&mut batch).await;
        let mut failed = JoinSet::new();
        self.credit_claimed(&mut batch, &mut failed).await;
        self.mark_credited(&mut batch, &mut failed).await;
        self.move_tokens(grants, &batch.moves).await;
        batch.answers(failed).await
    }

    /// Resolves, all at once, the grants taken over from an owner that may have
    /// credited, and sorts them: to credit, credited, or settled.
    async fn resolve_taken_over(&self, batch: &mut Batch<'_>) {
        let grants = batch.grants;
        let resolve = std::mem::take(&mut batch.resolve);
        let resolved = futures_util::future::join_all(
            resolve
                .iter()
                .map(|(i, claim_id)| self.resolve(&grants[*i], claim_id)),
        )
        .await;
        for ((i, claim_id), r) in resolve.into_iter().zip(resolved) {
            match r {
                Ok(Resolved::NotCredited) => batch.queue_credit(i, claim_id),
                Ok(Resolved::Credit) => {
                    batch.resolved_first.insert(i);
                    batch.queue_credit(i, claim_id);
                }
                Ok(Resolved::Credited(receipt)) => batch.credited.push((i, claim_id, receipt)),
                Ok(Resolved::Settled(outcome)) => batch.out[i] = Some(Ok(outcome)),
                Err(e) => batch.out[i] = Some(Err(e)),
            }
        }
    }

    /// Credits the claimed grants, one `credit_many` call per reward type, all types
    /// concurrently; a failed credit finishes on a task of its own in `failed`.
    async fn credit_claimed(&self, batch: &mut Batch<'_>, failed: &mut Finishing) {
        let grants = batch.grants;
        let answers = futures_util::future::join_all(
            std::mem::take(&mut batch.claimed)
                .into_iter()
                .map(|(reward_type, list)| self.credit_type(grants, reward_type, list)),
        )
        .await;
        for (i, claim_id, r) in answers.into_iter().flatten() {
            match r {
                Ok(receipt) => batch.credited.push((i, claim_id, receipt)),
                Err(e) => {
                    let (me, g) = (self.clone(), grants[i].clone());
                    let prior = if batch.resolved_first.contains(&i) {
                        Prior::Unknown
                    } else {
                        Prior::Fresh
                    };
                    failed
                        .spawn(async move { (i, me.not_credited(&g, &claim_id, e, prior).await) });
                }
            }
        }
    }

    /// Marks the credited grants `GRANTED` in one batch; a grant whose mark failed
    /// there is marked again on a task of its own in `failed`.
    async fn mark_credited(&self, batch: &mut Batch<'_>, failed: &mut Finishing) {
        let grants = batch.grants;
        let credited = std::mem::take(&mut batch.credited);
        let items: Vec<(Grant, String, String)> = credited
            .iter()
            .map(|(i, id, receipt)| (grants[*i].clone(), id.clone(), receipt.clone()))
            .collect();
        let finished = self.claims.grant_many(&items).await;
        for ((i, claim_id, receipt), f) in credited.into_iter().zip(finished) {
            let answer = match f {
                Ok(Finish::Done) => {
                    batch.moves.push(i);
                    Ok(Outcome::Granted {
                        receipt,
                        duplicate: false,
                    })
                }
                Ok(Finish::LostLease) => {
                    Ok(self.granted(&grants[i], Finish::LostLease, receipt).await)
                }
                // The batch's mark failed: this one is retried on its own (the
                // credit happened and must be recorded).
                Err(_) => {
                    let (me, g) = (self.clone(), grants[i].clone());
                    failed.spawn(async move { (i, me.mark_granted(&g, &claim_id, receipt).await) });
                    continue;
                }
            };
            batch.out[i] = Some(answer);
        }
    }

    /// Moves the tokens of the grants `moves` (indexes into `grants`) out of their
    /// users' pending hashes, together.
    async fn move_tokens(&self, grants: &[Grant], moves: &[usize]) {
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
    }

    /// Credits the claimed grants `list` (index into `grants`, claim id) of one reward
    /// type through its downstream, in one `credit_many` call.
    async fn credit_type(
        &self,
        grants: &[Grant],
        reward_type: &str,
        list: Vec<(usize, String)>,
    ) -> Vec<(usize, String, Result<String, CreditError>)> {
        let Some(d) = self.downstream(reward_type) else {
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
                    Err(CreditError::new(
                        ErrorCode::Unavailable,
                        "downstream answered fewer credits than it was sent",
                    ))
                });
                (i, claim_id, r)
            })
            .collect()
    }
}
