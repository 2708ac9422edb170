//! The claim store's failures, and the count of records the scripts could not read.

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
pub(super) fn unreadable_record() {
    metrics::counter!("reward_service_unreadable_records_total").increment(1);
}
