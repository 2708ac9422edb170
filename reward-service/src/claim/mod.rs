//! Claiming a grant: the idempotency record and the budget, checked and changed by one
//! atomic Redis script.
//!
//! # Keys
//! Every trade number has **one** record, whatever activity, scene or downstream it is
//! granted through: one trade number, one grant. Its slot depends on the trade number
//! only: shard `crc32(trade number) % shards`, hash tag `{prefix.shard}`. Each scene's
//! budget is split over the same shards, one budget key per (shard, scene) in that
//! shard's slot, so one script can check the record and deduct the budget atomically:
//!
//! ```text
//! {prefix}:meta                        hash  shards (fixed at first use), records
//! {prefix}:{prefix.3}:pin              string  shards, again, in each shard's slot
//! {prefix}:{prefix.3}:b:{scene}        hash  cap, spent, hold, holder
//! {prefix}:{prefix.3}:t:{trade_no}     string  the record: amount, scene, user, type,
//!                                              activity, state, lease, owner, clean,
//!                                              result, one line each
//! {prefix}:{prefix.3}:doubt            zset  trade numbers held IN_DOUBT → since (ms)
//! ```
//!
//! # Records
//! A record is one string, not a hash, because that is what makes a grant cheap: a
//! claim of a new trade number is one `SET NX GET EX` (it creates the record with its
//! TTL, or answers the record already there, which the script then judges), and the
//! usual finish is one `SET XX GET KEEPTTL` (it writes the final record and answers the
//! one it replaced; a finish that may not change it puts it back in the same script).
//! A hash took three commands to claim (`HMGET`, `HSET`, `EXPIRE`) and three to finish
//! (`HMGET`, `HSET`, `HDEL` of the lease fields): `docs/scale.md` has the measured
//! cost per credited reward. The fields are lines in a fixed order (identity first, so a
//! claim's comparison reads four lines; the result last, so a receipt may hold any
//! byte); ids may not hold a line break ([`ClaimError::Invalid`]). [`Record::parse`]
//! reads one. A store whose records an earlier build wrote as hashes is refused at
//! start ([`ClaimError::HashRecords`]), whether its pin says so or, pin lost, its keys
//! do; `{prefix}:meta` names the format (`records`). Every instance on a store moves to
//! this format together (stop the earlier build's instances before starting this one's):
//! a hash record written after the check fails its claims (`WRONGTYPE`, retried,
//! never credited) until it expires. The scripts need Redis 7.0 or later (`SET` with
//! `NX` and `GET`), checked at start ([`ClaimError::RedisVersion`]).
//!
//! **The shard count is fixed at first use.** It decides where every record and budget
//! lives; an instance configured with another count would look for records in the
//! wrong place and credit them again. [`Claims::connect`] stores the count in
//! `{prefix}:meta` the first time and refuses to start ([`ClaimError::ShardsChanged`])
//! when the configured count differs. To change it, use a new key prefix. If the pin
//! itself is gone, the store's own keys are read before a new one is written
//! ([`layout`]): a start they prove wrong, or cannot prove right within a bounded
//! walk, is refused with the command that settles it.
//!
//! # States ([`ClaimState`])
//! `IN_PROGRESS` (with a lease and an owner, the claim id) → `GRANTED` (with the stored
//! result) or `FAILED` (permanent; the budget is given back) or `IN_DOUBT` (the credit
//! may have happened; the deduction stands, see [`crate::grant`]). Every transition is
//! a compare-and-set inside a script. Lease times come from Redis's own clock (`TIME`),
//! so workers' clocks never matter. Records expire `retention_secs` after their last
//! claim (a finish within the lease keeps the TTL its claim set moments before; a
//! finish of a record that was in doubt, or whose lease ended over an hour ago,
//! re-arms it); the retention is checked at start to outlast the tokens.
//!
//! A claim of a record that exists but whose lease is over says what the earlier
//! owner left behind ([`Prior`]): released cleanly (it knows nothing was credited), in
//! doubt, or nothing at all (it vanished mid-call). Only the first lets the new owner
//! credit without first resolving the earlier attempt.
//!
//! # The guarantee
//! - **No trade number is deducted twice**: the deduction happens only when the record
//!   is created, in the same script; a takeover does not deduct again, and a permanent
//!   failure refunds exactly once (only the owner can fail a grant).
//! - **No shard spends past its cap**, whatever the concurrency, retries or crashes:
//!   check and deduct are one script. The scene's total cap is the sum of its shards'
//!   caps, so the scene never overspends either.
//! - **The whole budget is spendable**: a claim whose shard lacks room borrows the
//!   other shards' unspent budget first (lowering the lender's cap before raising its
//!   own, so the sum of caps never rises; the `budget` module has the moves and why a
//!   crash between the two can only strand units, never create them). A grant is
//!   refused `BudgetExhausted` only when the scene as a whole lacks room.
//! - **A changed budget never lets a scene spend past the new total**:
//!   [`Claims::set_budget`] first holds every shard of the scene (claims of new trade
//!   numbers answer `HELD`, `BUDGET_HELD` to callers with the hold's time left, for at
//!   most [`BUDGET_HOLD_MS`]), reads what each has spent, and gives each shard its
//!   spending plus an even share of what is left, stamped with the change's own id; a
//!   move happens only between shards the same change stamped. A total
//!   below what was spent is refused ([`ClaimError::BelowSpent`]). A start-up never
//!   overwrites a live budget ([`Claims::init_budget`] sets only shards with none).
//! - **Exact amounts**: amounts and budgets are at most [`MAX_AMOUNT`] (2^53 - 1), so
//!   the scripts' double-precision arithmetic compares them exactly.
//! - **No "last K trade numbers" list per shard**: the trade number's own record,
//!   kept `retention_secs`, already refuses a second deduction. Redis for this store
//!   must run without eviction (`maxmemory-policy noeviction`), which the stack's
//!   Redis does; tokens older than the retention are never credited
//!   ([`crate::service`]).
//! - **A finish after a credit is never lost to a takeover**: marking a grant
//!   `GRANTED` needs a receipt, not the lease, so a worker whose lease expired still
//!   records its credit; the next owner then finds `GRANTED`.
//!
//! # Waiting for a replica
//! On a Redis with replicas (a Redis Cluster), `replica_acks = 1` makes every claim
//! wait until a replica holds it before its grant may credit, so a failover cannot
//! forget a claim whose money already moved (the `replicas` module, `docs/cluster.md`).

use std::sync::Arc;

use fred::prelude::*;
use reward_runtime::keyspace::LayoutProof;
use reward_runtime::script::Script;

mod batch;
mod budget;
mod doubt;
mod keys;
pub mod layout;
mod replicas;
mod scripts;
mod single;

pub use self::scripts::{CLAIM_LUA, FIELDS_LUA, pack_fields};

use self::scripts::{
    BORROW_LUA, CLAIM_MANY_LUA, FINISH_MANY_LUA, GET_LUA, HOLD_LUA, LEND_LUA, RELEASE_LUA,
    SWEEP_LUA, Scripts, UNHOLD_LUA,
};

/// The largest amount or budget: every integer up to it is exact in the scripts'
/// double-precision numbers, and so is every comparison against it.
pub const MAX_AMOUNT: i64 = (1 << 53) - 1;

/// How long a budget change may hold a scene's shards (a crashed operator's hold
/// ends by itself after this).
pub const BUDGET_HOLD_MS: u64 = 5_000;

/// How often a claim whose shard ran out borrows from the other shards and asks again
/// before it answers `BudgetExhausted`: concurrent claims can take what it borrowed.
pub const BORROW_TRIES: u32 = 3;

pub use self::budget::{HOLD_RETRY_MS, MOVE_RESULTS};

/// Deadline of one claim-store command: a claim that cannot answer within it is
/// retried by the caller (the script may have run: the record says so next time).
pub const CLAIM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Settings of the claim store.
#[derive(Debug, Clone)]
pub struct ClaimConfig {
    /// Prefix of every key.
    pub key_prefix: String,
    /// Shards of the record and budget space (fixed at first use, module doc).
    pub shards: u32,
    /// How long a claim is held before another worker may take it over.
    pub lease_ms: u64,
    /// How long a record is kept after its last change (default 30 days).
    pub retention_secs: u64,
    /// Redis connections in the pool.
    pub pool_size: usize,
    /// Replicas that must hold a claim before its grant is credited (0: do not wait;
    /// see [`replicas`](self#waiting-for-a-replica)).
    pub replica_acks: u32,
    /// How long a claim waits for them before the grant is retried instead.
    pub replica_wait_ms: u64,
}

impl Default for ClaimConfig {
    fn default() -> Self {
        Self {
            key_prefix: "rs".into(),
            shards: 16,
            lease_ms: 30_000,
            retention_secs: 30 * 24 * 3600,
            pool_size: 4,
            replica_acks: 0,
            replica_wait_ms: 1_000,
        }
    }
}

/// One grant as the claim store sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Budget scope (the service uses `activity/scene`, see [`crate::service`]).
    pub scene: String,
    /// The activity the reward was won in (kept in the record, used to find the
    /// user's token once credited).
    pub activity_id: String,
    /// The global idempotency key.
    pub trade_no: String,
    /// Who is credited.
    pub user_id: String,
    /// What is credited.
    pub reward_type: String,
    /// How much (in the reward type's smallest unit).
    pub amount: i64,
}

/// A record's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimState {
    /// Claimed; a credit may be under way.
    InProgress,
    /// A credit's outcome is unknown; the deduction stands until it is resolved.
    InDoubt,
    /// Credited; the result is the receipt.
    Granted,
    /// Failed for good; refunded; the result is the reason.
    Failed,
}

impl ClaimState {
    /// The name stored in Redis.
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimState::InProgress => "IN_PROGRESS",
            ClaimState::InDoubt => "IN_DOUBT",
            ClaimState::Granted => "GRANTED",
            ClaimState::Failed => "FAILED",
        }
    }

    /// The state a stored name stands for.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "IN_PROGRESS" => ClaimState::InProgress,
            "IN_DOUBT" => ClaimState::InDoubt,
            "GRANTED" => ClaimState::Granted,
            "FAILED" => ClaimState::Failed,
            _ => return None,
        })
    }
}

/// What an earlier owner of a claimed record left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prior {
    /// A new record: nothing was ever sent.
    Fresh,
    /// Released by an owner that knew nothing was credited.
    Released,
    /// Held in doubt: a credit may have happened.
    InDoubt,
    /// The earlier owner's lease ran out with no word: it may have credited.
    Unknown,
}

impl Prior {
    /// Whether the earlier attempt must be resolved before crediting.
    pub fn needs_resolving(self) -> bool {
        matches!(self, Prior::InDoubt | Prior::Unknown)
    }
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This caller now owns the grant: credit downstream (after resolving `prior`
    /// when it asks for that), then finish.
    Claimed {
        /// The owner id to finish with.
        claim_id: String,
        /// What the earlier owner left, if the record existed.
        prior: Prior,
    },
    /// Already granted: the stored result; nothing is credited again.
    Duplicate {
        /// What the first grant stored.
        result: String,
    },
    /// Failed permanently before: the stored reason.
    FailedPermanent {
        /// What the failure stored.
        result: String,
    },
    /// Another worker holds a live lease on the trade number: try again later (never
    /// drop the request).
    RetryLater {
        /// Milliseconds left on that lease.
        lease_left_ms: u64,
    },
    /// The scene's budget shard is held by a budget change (`set_budget`), or the
    /// budget units it borrowed kept being taken by concurrent claims: nothing was
    /// claimed; try again after `hold_left_ms`.
    BudgetHeld {
        /// Milliseconds to wait, at most the hold's time left.
        hold_left_ms: u64,
    },
    /// The trade number is known with another scene, user, type or amount: never
    /// credited.
    Conflict,
    /// This trade number's budget shard has no room for the amount.
    BudgetExhausted,
    /// The scene has no budget set.
    NoBudget,
}

/// The record format `{prefix}:meta` names (`records`): one string a record.
pub const RECORD_FORMAT: &str = "string-v1";

/// A trade number's record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its state.
    pub state: ClaimState,
    /// Its budget scope.
    pub scene: String,
    /// Its activity.
    pub activity_id: String,
    /// The user it was claimed for.
    pub user_id: String,
    /// Its reward type.
    pub reward_type: String,
    /// Its amount.
    pub amount: i64,
    /// The stored result (receipt when granted, reason when failed).
    pub result: String,
}

impl Record {
    /// Reads a stored record (module doc, "Records"): `None` when `text` is not one.
    ///
    /// ```
    /// use reward_service::claim::{ClaimState, Record};
    /// let r = Record::parse("5\nrain/r1\nu1\ncoin\nrain\nGRANTED\n\n\n\ntx:9\nmore").unwrap();
    /// assert_eq!((r.state, r.amount, r.result.as_str()), (ClaimState::Granted, 5, "tx:9\nmore"));
    /// assert!(Record::parse("5\nrain").is_none());
    /// ```
    pub fn parse(text: &str) -> Option<Self> {
        let f: Vec<&str> = text.splitn(10, '\n').collect();
        let [
            amount,
            scene,
            user,
            typ,
            activity,
            state,
            _lease,
            _owner,
            _clean,
            result,
        ] = f.as_slice()
        else {
            return None;
        };
        Some(Record {
            state: ClaimState::parse(state)?,
            scene: (*scene).to_string(),
            activity_id: (*activity).to_string(),
            user_id: (*user).to_string(),
            reward_type: (*typ).to_string(),
            amount: amount.parse().ok()?,
            result: (*result).to_string(),
        })
    }

    /// The stored text of a finished record (what the scripts write; for tools and
    /// benchmarks that lay out a store).
    pub fn stored(&self) -> String {
        format!(
            "{}\n{}\n{}\n{}\n{}\n{}\n\n\n\n{}",
            self.amount,
            self.scene,
            self.user_id,
            self.reward_type,
            self.activity_id,
            self.state.as_str(),
            self.result
        )
    }
}

/// What finishing a claim did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The record moved to its final state (or was already `GRANTED`, for a grant).
    Done,
    /// The record is no longer this claim's (its lease expired and another claim took
    /// over, or it was already finished otherwise): nothing changed.
    LostLease,
}

/// The most shards a claim store may have (each keeps a pin every start writes).
pub const MAX_SHARDS: u32 = 4096;

/// Claim store failures.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClaimError {
    /// The grant cannot be stored as given.
    #[error("invalid grant: {0}")]
    Invalid(&'static str),
    /// Redis refused, timed out or is unreachable.
    #[error("claim store: {0}")]
    Redis(String),
    /// Fewer replicas than `claims.replica_acks` acknowledged a claim in time: it is
    /// not used (nothing is credited) and the grant is retried.
    #[error("claim store: {acked} of {wanted} replicas acknowledged the claim in time")]
    NotReplicated {
        /// Replicas that did.
        acked: u32,
        /// `claims.replica_acks`.
        wanted: u32,
    },
    /// A primary has fewer replicas than `claims.replica_acks` (refused at start).
    #[error("claims.replica_acks is {wanted} but {node} has {have} connected replicas")]
    Replicas {
        /// The primary.
        node: String,
        /// Its connected replicas.
        have: u32,
        /// `claims.replica_acks`.
        wanted: u32,
    },
    /// The script answered something this build does not know.
    #[error("claim store: unexpected reply {0:?}")]
    Reply(Vec<String>),
    /// The configured shard count differs from the one the store was created with.
    #[error(
        "claims.shards is {configured} but the claim store under prefix {prefix:?} was created with {stored}: records and budgets live by that count, so this instance would credit granted trade numbers again. Configure {stored}, or use a new key prefix"
    )]
    ShardsChanged {
        /// The key prefix.
        prefix: String,
        /// What the config says.
        configured: u32,
        /// What the store was created with.
        stored: u32,
    },
    /// A budget below what the scene has already spent.
    #[error("budget {total} for {scene} is below what it has spent ({spent}); nothing changed")]
    BelowSpent {
        /// The scene.
        scene: String,
        /// The total asked for.
        total: i64,
        /// What its shards had spent.
        spent: i64,
    },
    /// Another budget change of the same scene ran at the same time.
    #[error("budget of {0} is being changed by another operator; nothing changed, try again")]
    BudgetBusy(String),
    /// The change was cut short after some shards took their new caps (a hold lapsed
    /// or another operator took over). Every shard is still within a cap, but the
    /// total is a mix of old and new: run the change again.
    #[error(
        "budget change of {scene} interrupted after {done} of {shards} shards took their new caps; run it again"
    )]
    BudgetPartial {
        /// The scene.
        scene: String,
        /// Shards updated.
        done: u32,
        /// All shards.
        shards: u32,
    },
    /// The store's pin (`{prefix}:meta`) is gone and its data proves another shard
    /// count.
    #[error(
        "claims.shards is {configured} but the claim store under prefix {prefix:?} lost its shard pin ({prefix}:meta) and its data proves another count ({key}: {why}). Starting would credit granted trade numbers again. Configure the store's own count, or use a new key prefix"
    )]
    LayoutDiffers {
        /// The key prefix.
        prefix: String,
        /// What the config says.
        configured: u32,
        /// The key that proves it.
        key: String,
        /// How.
        why: String,
    },
    /// The store's pin is gone and a bounded walk could not prove the configured count.
    #[error(
        "the claim store under prefix {prefix:?} lost its shard pin ({prefix}:meta), and a bounded walk ({keys} keys, {samples} records) could not prove claims.shards = {configured}. Run `reward-ctl layout claims --prefix {prefix} --shards {configured}`: it walks the whole store and restores the pin only if the data agrees"
    )]
    LayoutUnproven {
        /// The key prefix.
        prefix: String,
        /// What the config says.
        configured: u32,
        /// Keys of the store seen.
        keys: u64,
        /// Records among them.
        samples: u64,
    },
    /// Keys of the previous claim-store layout exist under this prefix.
    #[error(
        "the claim store under prefix {0:?} holds keys of the previous layout (records keyed per scene): starting on it would forget which trade numbers were granted. Use a new key prefix, or remove the old keys once their events and tokens have expired"
    )]
    OldLayout(String),
    /// Claim records of the earlier format (one hash each) exist under this prefix.
    #[error(
        "the claim store under prefix {0:?} holds claim records of an earlier format (a hash each; this build keeps each record as one string): this build cannot read them. Keep the earlier build serving this store until its records expire (claims.retention_secs after their last grant); a new key prefix would forget which trade numbers were granted, and any event, retry or token of that time would be credited again"
    )]
    HashRecords(String),
    /// The Redis is older than the scripts need.
    #[error(
        "the claim store needs Redis 7.0 or later (SET with both NX and GET), and {0} answered; upgrade it"
    )]
    RedisVersion(String),
}

/// Refuses a Redis older than 7.0: the claim scripts use `SET ... NX GET`, which an
/// older one refuses on every claim of a new trade number.
async fn check_version(client: &Client) -> Result<(), ClaimError> {
    let info: String =
        reward_runtime::keyspace::on_node(client, None, "INFO", vec!["server"]).await?;
    let version = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("redis_version:"))
        .unwrap_or("")
        .trim()
        .to_string();
    let major = version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if m >= 7 => Ok(()),
        _ => Err(ClaimError::RedisVersion(format!(
            "redis_version {version:?}"
        ))),
    }
}

/// Turns what the data says of the configured count into a start or a typed refusal.
fn check_layout(prefix: &str, shards: u32, proof: LayoutProof) -> Result<(), ClaimError> {
    match proof {
        LayoutProof::Empty => Ok(()),
        LayoutProof::Agrees { samples, complete } => {
            tracing::warn!(
                prefix,
                shards,
                records = samples,
                complete,
                "claim store shard pin was missing; its data agrees with claims.shards, pin restored"
            );
            Ok(())
        }
        LayoutProof::Differs { key, why } => Err(ClaimError::LayoutDiffers {
            prefix: prefix.to_string(),
            configured: shards,
            key,
            why,
        }),
        LayoutProof::Unproven { keys, samples } => Err(ClaimError::LayoutUnproven {
            prefix: prefix.to_string(),
            configured: shards,
            keys,
            samples,
        }),
    }
}

impl From<fred::error::Error> for ClaimError {
    fn from(e: fred::error::Error) -> Self {
        let text = e.to_string();
        if text.contains("WRONGTYPE") || text.contains("BADBUDGET") {
            // A key of another type under a record's, a budget's or the doubt index's
            // name (a hash record of an earlier build, another program's key), or a
            // budget whose `spent` or `hold` is not a number (the claim scripts refuse
            // it before any write).
            unreadable_record();
        }
        ClaimError::Redis(text)
    }
}

/// Counts a claim record the scripts could not read (`BADRECORD`: not in the record
/// format; or a key of another type under its name). Its grant fails
/// `STORE_UNAVAILABLE` and is retried; nothing is credited while it stays. Someone
/// else writes into the claims' keys, or an earlier build still runs on the store: the
/// operator is alerted (`RewardClaimRecordsUnreadable`).
pub(crate) fn unreadable_record() {
    metrics::counter!("reward_service_unreadable_records_total").increment(1);
}

/// The claim store.
#[derive(Clone)]
pub struct Claims {
    pool: Pool,
    cfg: Arc<ClaimConfig>,
    scripts: Arc<Scripts>,
}

impl std::fmt::Debug for Claims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claims")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

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

/// Start-ups tried again after a redirection (200 ms apart).
const START_TRIES: u32 = 25;

impl Claims {
    /// Connects to Redis at `redis_url`, loads the scripts, and fixes the shard count
    /// at first use (or refuses a count other than the stored one).
    pub async fn connect(redis_url: &str, cfg: ClaimConfig) -> Result<Self, ClaimError> {
        if cfg.shards == 0 || cfg.lease_ms == 0 || cfg.retention_secs == 0 || cfg.pool_size == 0 {
            return Err(ClaimError::Invalid(
                "shards, lease_ms, retention_secs and pool_size must be positive",
            ));
        }
        if cfg.shards > MAX_SHARDS {
            return Err(ClaimError::Invalid("shards must be at most 4096"));
        }
        if cfg.key_prefix.is_empty() || cfg.key_prefix.contains(['{', '}']) {
            return Err(ClaimError::Invalid(
                "key prefix must be set, without braces",
            ));
        }
        // Start-up's reads and writes are single commands: on a cluster in the middle of
        // a reshard one may be redirected (not run, reward_runtime::redis); start again.
        let mut tries = 0;
        loop {
            match Self::connect_once(redis_url, &cfg).await {
                Err(ClaimError::Redis(e))
                    if e.contains(reward_runtime::redis::REDIRECTED) && tries < START_TRIES =>
                {
                    tries += 1;
                    tracing::warn!(error = %e, "claim store start-up redirected by a moving slot; starting again");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                other => return other,
            }
        }
    }

    async fn connect_once(redis_url: &str, cfg: &ClaimConfig) -> Result<Self, ClaimError> {
        let cfg = cfg.clone();
        let pool =
            reward_runtime::redis::builder(redis_url, CLAIM_TIMEOUT)?.build_pool(cfg.pool_size)?;
        pool.init().await?;
        Self::check_replicas(pool.next(), cfg.replica_acks).await?;
        let load = |script: &'static str| {
            let client = pool.next().clone();
            async move { Script::load(&client, script).await }
        };
        let (claim, release, claim_many, finish_many, hold, unhold, sweep) = tokio::try_join!(
            load(CLAIM_LUA),
            load(RELEASE_LUA),
            load(CLAIM_MANY_LUA),
            load(FINISH_MANY_LUA),
            load(HOLD_LUA),
            load(UNHOLD_LUA),
            load(SWEEP_LUA),
        )?;
        let (lend, borrow, hmget, get) = tokio::try_join!(
            load(LEND_LUA),
            load(BORROW_LUA),
            load(reward_runtime::script::HMGET_LUA),
            load(GET_LUA),
        )?;
        let scripts = Arc::new(Scripts {
            claim,
            release,
            claim_many,
            finish_many,
            hold,
            unhold,
            lend,
            borrow,
            sweep,
            hmget,
            get,
        });
        check_version(pool.next()).await?;
        let meta = format!("{}:meta", cfg.key_prefix);
        let exists: i64 = pool.next().exists(&meta).await?;
        // A store an earlier build wrote (a pin without the record format, or no pin
        // and keys of its own): its records may be hashes, which this build neither
        // reads nor may overwrite (module doc, "Records").
        let hash_records = || async {
            let pattern = format!("{p}:{{{p}.*}}:t:*", p = cfg.key_prefix);
            reward_runtime::keyspace::any_match_of(pool.next(), &pattern, Some("hash")).await
        };
        if exists == 0 {
            if Self::old_layout(&pool, &cfg.key_prefix).await? {
                return Err(ClaimError::OldLayout(cfg.key_prefix.clone()));
            }
            // No pin: a fresh store, or one whose pin was lost. Its own keys decide.
            let proof =
                layout::prove(pool.next(), &cfg.key_prefix, cfg.shards, layout::SCAN_PAGES).await?;
            if !matches!(proof, LayoutProof::Empty) && hash_records().await? {
                return Err(ClaimError::HashRecords(cfg.key_prefix.clone()));
            }
            check_layout(&cfg.key_prefix, cfg.shards, proof)?;
        }
        let records: Option<String> = pool.next().hget(&meta, "records").await?;
        if exists == 1 && records.is_none() && hash_records().await? {
            return Err(ClaimError::HashRecords(cfg.key_prefix.clone()));
        }
        if records.as_deref().is_some_and(|r| r != RECORD_FORMAT) {
            return Err(ClaimError::HashRecords(cfg.key_prefix.clone()));
        }
        let _: i64 = pool.next().hsetnx(&meta, "records", RECORD_FORMAT).await?;
        let _: i64 = pool.next().hsetnx(&meta, "shards", cfg.shards).await?;
        let stored: Option<String> = pool.next().hget(&meta, "shards").await?;
        let stored = stored.as_deref().map(str::parse::<u32>);
        match stored {
            Some(Ok(n)) if n == cfg.shards => {}
            Some(Ok(n)) => {
                return Err(ClaimError::ShardsChanged {
                    prefix: cfg.key_prefix.clone(),
                    configured: cfg.shards,
                    stored: n,
                });
            }
            _ => {
                return Err(ClaimError::Reply(vec![format!(
                    "{meta} holds no readable shard count"
                )]));
            }
        }
        layout::write_shard_pins(pool.next(), &cfg.key_prefix, cfg.shards).await?;
        Ok(Self {
            pool,
            cfg: Arc::new(cfg),
            scripts,
        })
    }

    /// Whether budget keys of the previous layout (`{prefix}:{scene:N}:budget`) exist:
    /// one `SCAN` pass (per primary on a cluster), made only when the store has no `meta` yet (its first start
    /// under this layout).
    async fn old_layout(pool: &Pool, prefix: &str) -> Result<bool, ClaimError> {
        // Every primary of a cluster: a SCAN answers for its own node only.
        let pattern = format!("{prefix}:{{*}}:budget");
        Ok(reward_runtime::keyspace::any_match(pool.next(), &pattern).await?)
    }

    /// The store's settings.
    pub fn config(&self) -> &ClaimConfig {
        &self.cfg
    }

    /// The store's connections (the change trail lives in the same Redis).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Whether Redis answers.
    pub async fn ping(&self) -> Result<(), ClaimError> {
        let _: String = self.pool.next().ping(None).await?;
        Ok(())
    }
}
