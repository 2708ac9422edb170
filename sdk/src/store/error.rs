//! What the token store answers when it cannot store a token.

use std::time::Duration;

use super::keys;

/// Token store failures.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Redis refused, timed out or is unreachable.
    #[error("token store: {0}")]
    Redis(String),
    /// The user already holds the most tokens allowed in this activity.
    #[error("user already holds {cap} tokens in this activity")]
    CapReached {
        /// The cap.
        cap: u32,
    },
    /// Every place for an unanswered write stayed taken for the whole wait: the
    /// writer is behind Redis (see "When Redis is slow or failing" in
    /// [`TokenStore`](super::TokenStore)'s doc).
    #[error("token writer is behind: {pending} writes not yet stored, none answered in {waited:?}")]
    Backlog {
        /// Writes not yet answered (`store.max_pending`).
        pending: u64,
        /// How long the call waited for a place.
        waited: Duration,
    },
    /// The store is shutting down.
    #[error("token store closed")]
    Closed,
    /// `store.due_shards` differs from the count the store was first used with.
    #[error(
        "store.due_shards is {configured}, but this store's due index has {stored} shards (fixed at first use; set it back to {stored})"
    )]
    DueShards {
        /// The configured count.
        configured: u32,
        /// The count recorded in Redis.
        stored: u32,
    },
    /// The due index's pin (`{prefix}:due-shards`) is gone and the index itself proves
    /// another count.
    #[error(
        "store.due_shards is {configured} but the due index under prefix {prefix:?} lost its shard pin ({pin}) and its data proves another count ({key}: {why}). Set store.due_shards to the index's own count",
        pin = keys::due_shards_pin_key(.prefix)
    )]
    DueLayoutDiffers {
        /// The token store's key prefix.
        prefix: String,
        /// The configured count.
        configured: u32,
        /// The key that proves it.
        key: String,
        /// How.
        why: String,
    },
    /// The pin is gone and the index's keys could not prove the configured count
    /// (the index is read whole, so only a future proof that reads less answers this).
    #[error(
        "the due index under prefix {prefix:?} lost its shard pin ({pin}), and its keys ({keys} keys, {samples} entries read) could not prove store.due_shards = {configured}. Run `reward-ctl layout due --prefix {prefix} --shards {configured}`: it reads the whole index and restores the pin only if the data agrees",
        pin = keys::due_shards_pin_key(.prefix)
    )]
    DueLayoutUnproven {
        /// The token store's key prefix.
        prefix: String,
        /// The configured count.
        configured: u32,
        /// Index keys seen.
        keys: u64,
        /// Entries sampled, all agreeing.
        samples: u64,
    },
}

impl From<fred::error::Error> for StoreError {
    fn from(e: fred::error::Error) -> Self {
        StoreError::Redis(e.to_string())
    }
}
