//! Compensation from the token store: rewards whose token was stored but whose event
//! never reached a credit (the activity service died with the event in memory, a
//! queue lost it) are found and granted here.
//!
//! # The token store is the truth
//! A broker message only triggers a credit; the token the SDK stored says a reward was
//! won. Every token write is preceded by an entry in a *due index* (the SDK's
//! [`sdk::store`], "Due index"): one sorted set per index shard, member
//! `user|activity|trade`, score the write's time. A credit's token move removes the
//! entry again (best effort: a leftover is dropped by the next pass below). So the
//! index holds the rewards not yet credited, oldest first, and finding those that
//! waited too long costs a range read of the due ones, not a scan of every user's hash.
//!
//! # A pass
//! Every `interval_ms` each service instance walks the index shards. A shard is swept
//! by one instance at a time: the instance takes the shard's lease (`SET NX PX`,
//! `lease_ms`) and skips the shard when another holds it. Of a leased shard it reads at
//! most `batch` entries older than `grace_ms` and, per entry:
//! - the token is pending in the user's hash: it is opened with the service's keys and
//!   granted through [`Service::grant_batch`], the same path as a `GrantBatch`, so the
//!   trade number's claim record makes a second credit impossible (an event still on
//!   its way is answered `DUPLICATE` when it arrives). `GRANTED` and `DUPLICATE` end
//!   the entry. A live claim (`RETRY_LATER`: a consumer is crediting it now), a
//!   downstream failure a retry can fix and an exhausted budget keep it, moved back
//!   `retry_ms`, so one stuck reward does not block the shard; so does a reward type
//!   no downstream is configured for (`UNKNOWN_REWARD_TYPE`, counted `unknown_type`:
//!   the user was shown it, so it waits for the type's downstream). `CONFLICT`, `INVALID`,
//!   `FAILED_PERMANENT` and `IN_DOUBT` (held for an operator) end it, counted;
//! - the token is credited (moved by a credit whose index removal was lost), or
//!   marked credited: the entry ends;
//! - the user's hash holds nothing of it: its write has not landed. The SDK retries a write for
//!   `store.retry_for_ms`; once the entry is older than `unstored_after_ms` the write
//!   is taken as never landed, the entry ends and is counted
//!   (`reward_service_sweeper_entries_total{result="never_stored"}`);
//! - the token does not open (tampered, or sealed with a retired key): counted, ended;
//! - the token is past its `expires_at_ms` and nothing claimed it while it was valid:
//!   never credited (the wallet lists it as expired); the entry ends, counted
//!   `expired`. (One claimed in time is finished like any other.)
//!
//! # Rate
//! A pass grants at most `batch` rewards per shard, and a shard is swept by one
//! instance at a time, so the whole fleet grants at most
//! `shards × batch / interval` rewards per second however many instances run (64 ×
//! 100 per second by default), which bounds what compensation can add to the
//! downstream's load on top of the consumers' limited rate.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use proto::v1::GrantOutcome;
use reward_runtime::clock::now_ms;
use serde::Deserialize;
use tokio::sync::watch;

use crate::service::{Proofs, Service, event_of};

/// `[sweeper]` settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SweepConfig {
    /// Whether this instance sweeps.
    pub enabled: bool,
    /// A token younger than this is left to its event.
    pub grace_ms: u64,
    /// Time between passes.
    pub interval_ms: u64,
    /// Most entries a pass takes from one shard.
    pub batch: usize,
    /// How long a shard's lease lasts (longer than a pass over one shard).
    pub lease_ms: u64,
    /// An entry kept (live claim, retryable failure) is looked at again this much later.
    pub retry_ms: u64,
    /// An entry whose token is still not stored this long after its write began is
    /// taken as a write that never landed (longer than the SDK's `retry_for_ms`).
    pub unstored_after_ms: u64,
}

impl Default for SweepConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            grace_ms: 60_000,
            interval_ms: 1_000,
            batch: 100,
            lease_ms: 10_000,
            retry_ms: 5_000,
            unstored_after_ms: 600_000,
        }
    }
}

impl SweepConfig {
    /// Refuses settings that cannot work.
    pub fn check(&self) -> Result<(), String> {
        let positive = [
            ("grace_ms", self.grace_ms),
            ("interval_ms", self.interval_ms),
            ("lease_ms", self.lease_ms),
            ("retry_ms", self.retry_ms),
            ("unstored_after_ms", self.unstored_after_ms),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("sweeper.{name} must be above 0"));
        }
        if self.batch == 0 || self.batch > 10_000 {
            return Err("sweeper.batch must be 1..=10000".into());
        }
        if self.unstored_after_ms < self.grace_ms {
            return Err("sweeper.unstored_after_ms must be at least sweeper.grace_ms".into());
        }
        Ok(())
    }
}

/// What one pass did, by result (the `result` label of
/// `reward_service_sweeper_entries_total`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    /// Entries by result: `granted`, `duplicate`, `kept` (live claim, retryable),
    /// `already_credited`, `never_stored`, `illegal`, `malformed`, `expired`, and the final
    /// refusals by outcome (`conflict`, `invalid`, `failed_permanent`, `in_doubt`).
    pub results: BTreeMap<&'static str, u64>,
    /// Shards this instance swept (held the lease).
    pub shards: u64,
}

impl Swept {
    fn add(&mut self, result: &'static str, n: u64) {
        if n > 0 {
            *self.results.entry(result).or_default() += n;
            metrics::counter!("reward_service_sweeper_entries_total", "result" => result)
                .increment(n);
        }
    }

    /// Entries with `result`.
    pub fn get(&self, result: &str) -> u64 {
        self.results.get(result).copied().unwrap_or(0)
    }
}

/// Releases a lease only when this instance still holds it.
const RELEASE_LUA: &str = include_str!("sweeper/release.lua");

/// The hash beside a shard's index that keeps when a not-yet-stored entry was first
/// indexed.
fn seen_key(index: &str) -> String {
    format!("{index}:seen")
}

/// One due entry read from the index.
struct Entry {
    member: String,
    user: String,
    activity: String,
    trade: String,
    at_ms: i64,
}

/// The sweeper of one service instance.
#[derive(Debug, Clone)]
pub struct Sweeper {
    service: Service,
    cfg: SweepConfig,
    owner: String,
    /// The lease release script, loaded at first use (then sent by SHA).
    release: Arc<tokio::sync::OnceCell<reward_runtime::script::Script>>,
}

impl Sweeper {
    /// A sweeper granting through `service`.
    pub fn new(service: Service, cfg: SweepConfig) -> Self {
        Self {
            service,
            cfg,
            owner: format!("{:016x}", rand::random::<u64>()),
            release: Arc::default(),
        }
    }

    /// Runs passes every `interval_ms` until `stop` says true.
    pub fn spawn(self, mut stop: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let every = Duration::from_millis(self.cfg.interval_ms);
            loop {
                let swept = self.pass().await;
                if swept.results.values().any(|&n| n > 0) {
                    tracing::info!(results = ?swept.results, "sweeper pass");
                }
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    _ = stop.changed() => return,
                }
                if *stop.borrow() {
                    return;
                }
            }
        })
    }

    /// One pass over every index shard this instance can lease.
    pub async fn pass(&self) -> Swept {
        let store = self.service.sdk().store();
        let mut swept = Swept::default();
        let shards = store.due_shards();
        // A random start, so instances do not all contend for shard 0 first.
        let first = rand::random::<u32>() % shards.max(1);
        for i in 0..shards {
            let shard = (first + i) % shards;
            match self.sweep_shard(shard, &mut swept).await {
                Ok(true) => swept.shards += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(shard, error = %e, "sweeper: shard skipped");
                }
            }
        }
        swept
    }

    /// Sweeps one shard if its lease is free; false when another instance holds it.
    async fn sweep_shard(&self, shard: u32, swept: &mut Swept) -> Result<bool, fred::error::Error> {
        let store = self.service.sdk().store();
        let client = store.pool().next();
        let key = store.due_key(shard);
        let lease = format!("{key}:lease");
        let taken: Option<String> = client
            .set(
                &lease,
                self.owner.as_str(),
                Some(Expiration::PX(
                    i64::try_from(self.cfg.lease_ms).unwrap_or(i64::MAX),
                )),
                Some(SetOptions::NX),
                false,
            )
            .await?;
        if taken.is_none() {
            return Ok(false);
        }
        let result = self.sweep_leased(client, &key, swept).await;
        // Not released (an error, a lost answer): the lease expires after lease_ms.
        if let Ok(release) = self
            .release
            .get_or_try_init(|| reward_runtime::script::Script::load(client, RELEASE_LUA))
            .await
        {
            let _: Result<i64, _> = release
                .eval(client, || {
                    (vec![lease.clone()], vec![Value::from(self.owner.as_str())])
                })
                .await;
        }
        result.map(|()| true)
    }

    async fn sweep_leased(
        &self,
        client: &Client,
        key: &str,
        swept: &mut Swept,
    ) -> Result<(), fred::error::Error> {
        let due_before = now_ms() - i64::try_from(self.cfg.grace_ms).unwrap_or(i64::MAX);
        let raw: Vec<(String, f64)> = client
            .zrangebyscore(
                key,
                "-inf",
                due_before,
                true,
                Some((0, i64::try_from(self.cfg.batch).unwrap_or(100))),
            )
            .await?;
        if raw.is_empty() {
            return Ok(());
        }
        let mut entries = Vec::with_capacity(raw.len());
        let mut done: Vec<String> = Vec::new();
        for (member, score) in raw {
            match sdk::store::parse_due_member(&member) {
                Some((user, activity, trade)) => entries.push(Entry {
                    user: user.to_string(),
                    activity: activity.to_string(),
                    trade: trade.to_string(),
                    at_ms: score as i64,
                    member,
                }),
                None => {
                    swept.add("malformed", 1);
                    done.push(member);
                }
            }
        }
        let (grant, unstored) = self.classify(entries, &mut done, swept).await?;
        let mut kept = Vec::new();
        self.settle_unstored(client, key, unstored, &mut done, &mut kept, swept)
            .await?;
        self.grant(grant, &mut done, &mut kept, swept).await;
        if !done.is_empty() {
            let _: i64 = client.zrem(key, done.clone()).await?;
            let _: i64 = client.hdel(seen_key(key), done).await?;
        }
        if !kept.is_empty() {
            let later = (now_ms() - i64::try_from(self.cfg.grace_ms).unwrap_or(0)
                + i64::try_from(self.cfg.retry_ms).unwrap_or(0)) as f64;
            let values: Vec<(f64, String)> = kept.into_iter().map(|m| (later, m)).collect();
            let _: i64 = client
                .zadd(key, Some(SetOptions::XX), None, false, false, values)
                .await?;
        }
        Ok(())
    }

    /// Entries whose token is not stored: ended as never stored once
    /// `unstored_after_ms` has passed since they were first indexed (kept in the
    /// shard's `:seen` hash, since moving an entry back changes its score), else kept.
    async fn settle_unstored(
        &self,
        client: &Client,
        key: &str,
        unstored: Vec<Entry>,
        done: &mut Vec<String>,
        kept: &mut Vec<String>,
        swept: &mut Swept,
    ) -> Result<(), fred::error::Error> {
        if unstored.is_empty() {
            return Ok(());
        }
        let seen = seen_key(key);
        let members: Vec<String> = unstored.iter().map(|e| e.member.clone()).collect();
        let firsts: Vec<Option<i64>> = client.hmget(&seen, members).await?;
        let now = now_ms();
        let limit = i64::try_from(self.cfg.unstored_after_ms).unwrap_or(i64::MAX);
        for (e, first) in unstored.into_iter().zip(firsts) {
            let first = first.unwrap_or(e.at_ms);
            if now - first >= limit {
                swept.add("never_stored", 1);
                done.push(e.member);
            } else {
                let _: i64 = client.hsetnx(&seen, e.member.as_str(), first).await?;
                swept.add("not_yet_stored", 1);
                kept.push(e.member);
            }
        }
        Ok(())
    }

    /// Reads each entry's token: to grant (with its sealed token), not stored (yet),
    /// or, when it was credited already, ended (added to `done`).
    async fn classify(
        &self,
        entries: Vec<Entry>,
        done: &mut Vec<String>,
        swept: &mut Swept,
    ) -> Result<(Vec<(Entry, String)>, Vec<Entry>), fred::error::Error> {
        let tokens = self.service.tokens();
        let found = futures_util::future::join_all(
            entries
                .iter()
                .map(|e| tokens.find(&e.user, &e.activity, &e.trade)),
        )
        .await;
        let mut grant = Vec::new();
        let mut unstored = Vec::new();
        for (e, f) in entries.into_iter().zip(found) {
            match f? {
                (Some(sealed), _) => grant.push((e, sealed)),
                (None, true) => {
                    swept.add("already_credited", 1);
                    done.push(e.member);
                }
                (None, false) => unstored.push(e),
            }
        }
        Ok((grant, unstored))
    }

    /// Grants the entries whose token is pending, in batches the service takes.
    async fn grant(
        &self,
        grant: Vec<(Entry, String)>,
        done: &mut Vec<String>,
        kept: &mut Vec<String>,
        swept: &mut Swept,
    ) {
        let codec = self.service.sdk().codec();
        let mut events = Vec::with_capacity(grant.len());
        let mut members = Vec::with_capacity(grant.len());
        for (e, sealed) in grant {
            match codec.open(&sealed, &e.user, &e.activity) {
                // Past its expiry it is refused EXPIRED below, unless already claimed.
                Ok(t) if t.trade_no == e.trade => {
                    events.push(event_of(&t));
                    members.push(e.member);
                }
                _ => {
                    swept.add("illegal", 1);
                    done.push(e.member);
                }
            }
        }
        let max = self.service.max_batch().max(1);
        let mut members = members.into_iter();
        for chunk in events.chunks(max) {
            // The token opened under the service's keys: it is its own proof.
            let results = self
                .service
                .grant_batch(chunk.to_vec(), Proofs::Vouched)
                .await;
            let created: Vec<i64> = chunk.iter().map(|e| e.created_at_ms).collect();
            crate::service::count_outcomes("sweeper", &results, &created);
            for r in results {
                let Some(member) = members.next() else {
                    break;
                };
                let outcome =
                    GrantOutcome::try_from(r.outcome).unwrap_or(GrantOutcome::FailedRetryable);
                match outcome {
                    GrantOutcome::Granted => {
                        swept.add("granted", 1);
                        done.push(member);
                    }
                    GrantOutcome::Duplicate => {
                        swept.add("duplicate", 1);
                        done.push(member);
                    }
                    GrantOutcome::Conflict => {
                        swept.add("conflict", 1);
                        done.push(member);
                    }
                    GrantOutcome::Invalid if r.error_code == "EXPIRED" => {
                        swept.add("expired", 1);
                        done.push(member);
                    }
                    // A stored reward of a type this service has no downstream for (a
                    // rollout where one instance lacks it, a config mistake): nothing
                    // was recorded, and the user was shown it, so it waits for the
                    // type to be configured rather than being dropped.
                    GrantOutcome::Invalid if r.error_code == "UNKNOWN_REWARD_TYPE" => {
                        swept.add("unknown_type", 1);
                        kept.push(member);
                    }
                    GrantOutcome::Invalid => {
                        swept.add("invalid", 1);
                        done.push(member);
                    }
                    GrantOutcome::FailedPermanent => {
                        swept.add("failed_permanent", 1);
                        done.push(member);
                    }
                    GrantOutcome::InDoubt => {
                        swept.add("in_doubt", 1);
                        done.push(member);
                    }
                    _ => {
                        swept.add("kept", 1);
                        kept.push(member);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SweepConfig;

    #[test]
    fn settings_that_cannot_work_are_refused() {
        assert!(SweepConfig::default().check().is_ok());
        let zero = SweepConfig {
            interval_ms: 0,
            ..SweepConfig::default()
        };
        assert!(zero.check().unwrap_err().contains("interval_ms"));
        let batch = SweepConfig {
            batch: 0,
            ..SweepConfig::default()
        };
        assert!(batch.check().is_err());
        let short = SweepConfig {
            unstored_after_ms: 1,
            ..SweepConfig::default()
        };
        assert!(short.check().unwrap_err().contains("unstored_after_ms"));
    }
}
