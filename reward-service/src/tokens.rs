//! The service's side of the SDK's token store: what happens to a user's token once
//! its reward is credited, and reading a user's tokens for the wallet. The token's
//! states, keys and scripts are stated once in [`sdk::store::life`]; this is the
//! service's part of them.
//!
//! # The move after a credit
//! After a credit is marked `GRANTED`, the service moves the token, in one script
//! ([`MOVE_MANY_LUA`]), from pending to credited: its field in the user's hash is
//! rewritten in place with `!` in front (the states are [`sdk::store::life::Field`]).
//! Leaving the pending state is what keeps it from being force-credited or listed as
//! pending again; keeping the token lets the wallet page show what was credited without
//! asking every downstream. A credit that runs before its token's write lands leaves a
//! mark (`!`) instead, and the SDK's write script then stores the token credited, never
//! pending. [`Tokens::held`] does not list marks.
//!
//! A failed move never fails the grant: the claim record says `GRANTED`, which is
//! what validation and withdrawal trust, so a token left pending is shown
//! as credited and can never be credited twice. It is retried in the background (from
//! 200 ms, doubling to 1 s, for [`MOVE_RETRY_FOR`]), so a Redis pause or failover does
//! not leave credited tokens listed as pending; a move whose answer was lost is
//! harmless to repeat (the token is no longer pending: the script moves nothing).
//! Only a move given up after that is counted ([`Tokens::move_failures`]) and logged.
//!
//! The per-user cap of the SDK counts pending tokens only: a credited token frees its
//! place.
//!
//! # Moves of a batch go together
//! A `GrantBatch` moves its tokens with [`Tokens::credited_many`]: one script call for
//! up to [`MOVE_CHUNK`] tokens whose keys share a Redis node's slot group, instead of
//! one call per token. On a single Redis every key qualifies, so a batch of 200 is
//! one call; in a cluster the tokens are grouped by hash slot (a user's keys share
//! one), so a batch of many users' tokens still makes one call per slot. What this
//! saves is each call's own cost inside Redis (parsing, the script's set-up, the
//! reply), which is of the order of a whole move's work.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fred::prelude::*;
use reward_runtime::script::Script;
use sdk::store::TokenStore;
use sdk::store::life::{Field, MOVE_MANY_LUA};

/// Most tokens one [`MOVE_MANY_LUA`] call moves (Redis runs a script to its end
/// before anything else, so a call stays well under a millisecond).
pub const MOVE_CHUNK: usize = 256;

/// How long a failed move is retried in the background before it is given up.
pub const MOVE_RETRY_FOR: Duration = Duration::from_secs(60);

/// One token to move: user, activity, trade number.
pub type Move<'a> = (&'a str, &'a str, &'a str);

/// A user's stored tokens, pending and credited.
#[derive(Clone)]
pub struct Tokens {
    store: TokenStore,
    ttl_secs: i64,
    script: Script,
    move_failures: Arc<AtomicU64>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("ttl_secs", &self.ttl_secs)
            .field("move_failures", &self.move_failures)
            .finish_non_exhaustive()
    }
}

/// Both hashes of one user and activity: trade number → sealed token.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// Not yet credited.
    pub pending: HashMap<String, String>,
    /// Credited (moved here after the grant).
    pub credited: HashMap<String, String>,
}

impl Tokens {
    /// Wraps the SDK's store (same Redis, same key prefix); `ttl_secs` is the store's
    /// token TTL.
    pub async fn new(store: TokenStore, ttl_secs: u64) -> Result<Self, fred::error::Error> {
        let script = Script::load(store.pool().next(), MOVE_MANY_LUA).await?;
        Ok(Self {
            store,
            ttl_secs: i64::try_from(ttl_secs).unwrap_or(i64::MAX),
            script,
            move_failures: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Moves a credited reward's token from pending to credited. Never fails the
    /// caller: a Redis error is counted ([`Tokens::move_failures`]) and logged.
    pub async fn credited(&self, user_id: &str, activity_id: &str, trade_no: &str) -> bool {
        self.credited_many(&[(user_id, activity_id, trade_no)])
            .await
            .first()
            .copied()
            .unwrap_or(false)
    }

    /// Moves many credited rewards' tokens (see the module doc): one script call per
    /// slot group of at most [`MOVE_CHUNK`] tokens, all calls at once. Answers, in the
    /// order of `moves`, whether each token moved. Never fails the caller: a failed
    /// call counts each of its tokens in [`Tokens::move_failures`] and is logged.
    pub async fn credited_many(&self, moves: &[Move<'_>]) -> Vec<bool> {
        let mut out = vec![false; moves.len()];
        let client = self.store.pool().next();
        let chunks = reward_runtime::redis::slot_chunks(
            client.is_clustered(),
            0..moves.len(),
            |i| self.store.key(moves[i].0, moves[i].1),
            MOVE_CHUNK,
        );
        let calls = chunks
            .iter()
            .map(|idx| async move { (idx.as_slice(), self.move_chunk(moves, idx).await) });
        for (idx, r) in futures_util::future::join_all(calls).await {
            match r {
                Ok(moved) if moved.len() == idx.len() => {
                    for (&i, m) in idx.iter().zip(moved) {
                        out[i] = m == 1;
                    }
                }
                _ => {
                    let owned: Vec<(String, String, String)> = idx
                        .iter()
                        .map(|&i| {
                            let (u, a, t) = moves[i];
                            (u.to_string(), a.to_string(), t.to_string())
                        })
                        .collect();
                    let me = self.clone();
                    tokio::spawn(async move { me.retry_moves(owned).await });
                }
            }
        }
        self.unindex(moves).await;
        out
    }

    /// Removes credited rewards from the due index (one pipeline of `ZREM`s, one per
    /// index shard). Best effort: an entry left behind is ended by the sweeper's next
    /// look, which finds the token credited ([`crate::sweeper`]).
    async fn unindex(&self, moves: &[Move<'_>]) {
        let mut by_shard: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
        for (user, activity, trade) in moves {
            by_shard
                .entry(self.store.due_shard(user))
                .or_default()
                .push(self.store.due_member(user, activity, trade));
        }
        let pipe = self.store.pool().next().pipeline();
        for (shard, members) in by_shard {
            let queued: Result<(), _> = pipe.zrem(self.store.due_key(shard), members).await;
            if queued.is_err() {
                return;
            }
        }
        let answers = pipe.try_all::<i64>().await;
        if let Some(Err(e)) = answers.iter().find(|r| r.is_err()) {
            tracing::debug!(error = %e, "due index entries not removed; the sweeper ends them");
        }
    }

    /// A reward's token: the sealed token when it is pending, and whether it is
    /// credited (its token, or a credit's mark).
    pub async fn find(
        &self,
        user_id: &str,
        activity_id: &str,
        trade_no: &str,
    ) -> Result<(Option<String>, bool), fred::error::Error> {
        let v: Option<String> = self
            .store
            .pool()
            .next()
            .hget(self.store.key(user_id, activity_id), trade_no)
            .await?;
        Ok(match v.as_deref().map(Field::of) {
            Some(Field::Pending(t)) => (Some(t.to_string()), false),
            Some(_) => (None, true),
            None => (None, false),
        })
    }

    async fn move_chunk(
        &self,
        moves: &[Move<'_>],
        idx: &[usize],
    ) -> Result<Vec<i64>, fred::error::Error> {
        self.script
            .eval(self.store.pool().next(), || {
                let mut keys = Vec::with_capacity(idx.len() * 2);
                let mut args = Vec::with_capacity(idx.len() + 1);
                args.push(Value::from(self.ttl_secs));
                for &i in idx {
                    let (user, activity, trade) = moves[i];
                    keys.push(self.store.key(user, activity));
                    args.push(Value::from(trade));
                }
                (keys, args)
            })
            .await
    }

    /// Retries one failed chunk until it answers or [`MOVE_RETRY_FOR`] has passed.
    async fn retry_moves(self, owned: Vec<(String, String, String)>) {
        let started = Instant::now();
        let mut wait = Duration::from_millis(200);
        let moves: Vec<Move<'_>> = owned
            .iter()
            .map(|(u, a, t)| (u.as_str(), a.as_str(), t.as_str()))
            .collect();
        let idx: Vec<usize> = (0..moves.len()).collect();
        loop {
            tokio::time::sleep(wait).await;
            let error = match self.move_chunk(&moves, &idx).await {
                Ok(moved) if moved.len() == idx.len() => {
                    metrics::counter!("reward_service_token_moves_retried_total")
                        .increment(idx.len() as u64);
                    return;
                }
                Ok(moved) => format!("{} answers for {} tokens", moved.len(), idx.len()),
                Err(e) => e.to_string(),
            };
            if started.elapsed() >= MOVE_RETRY_FOR {
                self.move_failures
                    .fetch_add(idx.len() as u64, Ordering::Relaxed);
                // The first trade number, to find the call in the logs.
                let trade_no = moves.first().map_or("", |m| m.2);
                tracing::warn!(tokens = idx.len(), %trade_no, %error, "credited tokens not moved from pending to credited; given up");
                return;
            }
            wait = (wait * 2).min(Duration::from_secs(1));
        }
    }

    /// Moves given up (after [`MOVE_RETRY_FOR`] of retries) since start.
    pub fn move_failures(&self) -> u64 {
        self.move_failures.load(Ordering::Relaxed)
    }

    /// Both hashes of a user in an activity.
    pub async fn held(&self, user_id: &str, activity_id: &str) -> Result<Held, fred::error::Error> {
        let all: HashMap<String, String> = self
            .store
            .pool()
            .next()
            .hgetall(self.store.key(user_id, activity_id))
            .await?;
        let mut held = Held::default();
        for (trade, v) in all {
            match Field::of(&v) {
                Field::Pending(t) => {
                    let t = t.to_string();
                    held.pending.insert(trade, t);
                }
                Field::Credited(t) => {
                    let t = t.to_string();
                    held.credited.insert(trade, t);
                }
                // A credit whose token has not landed (module doc) holds no token.
                Field::Marked => {}
            }
        }
        Ok(held)
    }

    /// Whether `trade_no` is held pending, and whether credited (a token or a mark).
    pub async fn holds(
        &self,
        user_id: &str,
        activity_id: &str,
        trade_no: &str,
    ) -> Result<(bool, bool), fred::error::Error> {
        let (pending, credited) = self.find(user_id, activity_id, trade_no).await?;
        Ok((pending.is_some(), credited))
    }
}
