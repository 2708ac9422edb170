//! Many grants at once: one script call per group, all groups concurrently, each
//! answer put back at its grant's place. On a single Redis a group is the whole batch
//! (up to [`GRANTS_PER_CALL`]), whatever its scenes and shards; on a Redis Cluster a
//! call's keys must share a slot, so a group is one shard's grants.
//!
//! Why one call, not one per shard, on a single Redis: every call is a task, a socket
//! write and a reply read in this process and a script call in Redis, and a batch over
//! many shards would make as many claim calls and as many finish calls. The decisions
//! are the same (each grant as by the single claim, in order within its call). The
//! price: a key of another type, or a budget that is not numbers, fails every claim of
//! its call, and a call of [`GRANTS_PER_CALL`] grants holds Redis for its length.

use fred::prelude::*;

use super::checks::{check_grant, new_claim_id, secs};
use super::error::ClaimError;
use super::grant::Grant;
use super::outcome::{Claim, Finish};
use super::record::ClaimState;
use super::scripts::{REARM_AFTER_MS, pack_fields as pack};
use super::store::Claims;

/// Grants in one claim or finish call at most: a call runs in Redis as one script,
/// which holds every other client for its length.
pub const GRANTS_PER_CALL: usize = 500;

impl Claims {
    /// Groups items into calls: on a Redis Cluster by shard (a call's keys share the
    /// shard's slot), else in order, [`GRANTS_PER_CALL`] at most per call. Index lists.
    fn calls<'a>(&self, grants: impl Iterator<Item = (usize, &'a Grant)>) -> Vec<Vec<usize>> {
        if !self.pool.next().is_clustered() {
            let all: Vec<usize> = grants.map(|(i, _)| i).collect();
            return all.chunks(GRANTS_PER_CALL).map(<[usize]>::to_vec).collect();
        }
        let mut groups: std::collections::BTreeMap<u32, Vec<usize>> =
            std::collections::BTreeMap::new();
        for (i, g) in grants {
            groups
                .entry(self.shard_of(&g.trade_no))
                .or_default()
                .push(i);
        }
        groups
            .into_values()
            .flat_map(|idx| {
                idx.chunks(GRANTS_PER_CALL)
                    .map(<[usize]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Claims many grants: exactly what [`Claims::claim`] would answer for each, in
    /// one script call per batch (per shard on a Redis Cluster; [`GRANTS_PER_CALL`] at
    /// most per call) instead of one per grant. The grants of one call are decided in
    /// their order in `grants` (calls run concurrently); the answers come back in that
    /// order.
    pub async fn claim_many(&self, grants: &[Grant]) -> Vec<Result<Claim, ClaimError>> {
        let mut invalid = Vec::new();
        let valid = grants
            .iter()
            .enumerate()
            .filter(|(i, g)| match check_grant(g) {
                Ok(()) => true,
                Err(e) => {
                    invalid.push((*i, e));
                    false
                }
            });
        let groups = self.calls(valid.collect::<Vec<_>>().into_iter());
        let mut out = self
            .per_call(grants, groups, |me, part| async move {
                me.claim_call(&part).await
            })
            .await;
        for (i, e) in invalid {
            out[i] = Err(e);
        }
        // A shard that ran short borrows for each of its refused grants in turn, as a
        // single claim would (rare: only at a scene's end). Once a scene answered
        // exhausted after its borrow (no other shard had room, so the only room left
        // is less than that grant), a later grant of that scene at least as large is
        // exhausted too: it is not asked again, which spares the scene's end a borrow
        // round per grant.
        let mut dry: std::collections::HashMap<&str, i64> = std::collections::HashMap::new();
        for (i, r) in out.iter_mut().enumerate() {
            let Some(g) = grants.get(i) else { continue };
            if !matches!(r, Ok(Claim::BudgetExhausted))
                || dry.get(g.scene.as_str()).is_some_and(|a| g.amount >= *a)
            {
                continue;
            }
            *r = self.claim(g).await;
            if matches!(r, Ok(Claim::BudgetExhausted)) {
                let least = dry.entry(g.scene.as_str()).or_insert(g.amount);
                *least = (*least).min(g.amount);
            }
        }
        out
    }

    /// Runs `run` once per group of `items` (indices from [`Claims::calls`]), all
    /// groups at once, and puts each answer back at its item's place. A group whose
    /// call failed answers its error for each of its items; an item in no group
    /// answers an error (its caller replaces it).
    async fn per_call<T, R, F, Fut>(
        &self,
        items: &[T],
        groups: Vec<Vec<usize>>,
        run: F,
    ) -> Vec<Result<R, ClaimError>>
    where
        T: Clone + Send + 'static,
        R: Send + 'static,
        F: Fn(Claims, Vec<T>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<Result<R, ClaimError>>, ClaimError>>
            + Send
            + 'static,
    {
        let mut out: Vec<Option<Result<R, ClaimError>>> = (0..items.len()).map(|_| None).collect();
        let mut set = tokio::task::JoinSet::new();
        for idx in groups {
            let part: Vec<T> = idx.iter().map(|&i| items[i].clone()).collect();
            let call = run(self.clone(), part);
            set.spawn(async move { (idx, call.await) });
        }
        while let Some(joined) = set.join_next().await {
            let Ok((idx, r)) = joined else { continue };
            match r {
                Ok(answers) => {
                    for (i, a) in idx.into_iter().zip(answers) {
                        out[i] = Some(a);
                    }
                }
                Err(e) => {
                    for i in idx {
                        out[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        out.into_iter()
            .map(|o| o.unwrap_or_else(|| Err(ClaimError::Redis("claim call task failed".into()))))
            .collect()
    }

    /// One call's grants (of one shard on a Redis Cluster) in one script call.
    async fn claim_call(
        &self,
        part: &[Grant],
    ) -> Result<Vec<Result<Claim, ClaimError>>, ClaimError> {
        let Some(first) = part.first() else {
            return Ok(Vec::new());
        };
        let ids: Vec<String> = part.iter().map(|_| new_claim_id()).collect();
        let client = self.pool.next();
        let reply: Vec<String> = self
            .scripts
            .claim_many
            .eval(client, || {
                let mut keys = Vec::with_capacity(part.len() * 2);
                let mut args = Vec::with_capacity(2 + part.len());
                args.push(secs(self.cfg.lease_ms));
                args.push(secs(self.cfg.retention_secs));
                for (g, id) in part.iter().zip(&ids) {
                    let shard = self.shard_of(&g.trade_no);
                    keys.push(self.record_key(shard, &g.trade_no));
                    keys.push(self.budget_key(&g.scene, shard));
                    args.push(Value::Bytes(
                        pack(&[
                            &g.scene,
                            &g.activity_id,
                            &g.user_id,
                            &g.reward_type,
                            &g.amount.to_string(),
                            id,
                        ])
                        .into(),
                    ));
                }
                (keys, args)
            })
            .await?;
        // One WAIT per call: on a cluster the call is one shard's, on one node any key
        // routes to it.
        let shard = self.shard_of(&first.trade_no);
        self.replicated(client, &self.budget_key(&first.scene, shard))
            .await?;
        if reply.len() != part.len() * 2 {
            return Err(ClaimError::Reply(reply));
        }
        Ok(reply
            .chunks(2)
            .zip(ids)
            .map(|(pair, id)| self.decode(&pair[0], pair[1].clone(), id))
            .collect())
    }

    /// Marks many credited grants `GRANTED` with their receipts, one script call per
    /// batch (per shard on a Redis Cluster). `items`: grant, claim id, receipt. A receipt proves the credit, so a
    /// record whose lease has passed to another owner is marked all the same.
    pub async fn grant_many(
        &self,
        items: &[(Grant, String, String)],
    ) -> Vec<Result<Finish, ClaimError>> {
        self.finish_many(items, ClaimState::Granted).await
    }

    pub(super) async fn finish_many(
        &self,
        items: &[(Grant, String, String)],
        state: ClaimState,
    ) -> Vec<Result<Finish, ClaimError>> {
        let groups = self.calls(items.iter().map(|(g, _, _)| g).enumerate());
        self.per_call(items, groups, move |me, part| async move {
            Ok(me
                .finish_call(&part, state)
                .await?
                .into_iter()
                .map(Ok)
                .collect())
        })
        .await
    }

    async fn finish_call(
        &self,
        part: &[(Grant, String, String)],
        state: ClaimState,
    ) -> Result<Vec<Finish>, ClaimError> {
        if part.is_empty() {
            return Ok(Vec::new());
        }
        for (g, _, _) in part {
            check_grant(g)?;
        }
        let reply: Vec<i64> = self
            .scripts
            .finish_many
            .eval(self.pool.next(), || {
                let mut keys = Vec::with_capacity(part.len() * 3);
                let mut args = Vec::with_capacity(2 + part.len());
                args.push(secs(self.cfg.retention_secs));
                args.push(secs(REARM_AFTER_MS));
                for (g, id, result) in part {
                    let shard = self.shard_of(&g.trade_no);
                    keys.push(self.record_key(shard, &g.trade_no));
                    keys.push(self.budget_key(&g.scene, shard));
                    keys.push(self.doubt_key(shard));
                    args.push(Value::Bytes(
                        pack(&[
                            id,
                            state.as_str(),
                            &g.trade_no,
                            &g.amount.to_string(),
                            &g.scene,
                            &g.user_id,
                            &g.reward_type,
                            &g.activity_id,
                            result,
                        ])
                        .into(),
                    ));
                }
                (keys, args)
            })
            .await?;
        if reply.len() != part.len() {
            return Err(ClaimError::Reply(
                reply.iter().map(i64::to_string).collect(),
            ));
        }
        Ok(reply
            .into_iter()
            .map(|d| {
                if d == 1 {
                    Finish::Done
                } else {
                    Finish::LostLease
                }
            })
            .collect())
    }
}
