//! The claim store's settings and the limits a start checks them against.

use super::error::ClaimError;

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
    /// see [`replicas`](super#waiting-for-a-replica)).
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

/// The most shards a claim store may have (each keeps a pin every start writes).
pub const MAX_SHARDS: u32 = 4096;

impl ClaimConfig {
    /// Refuses settings no store can run with (a start does, before it connects).
    pub(super) fn check(&self) -> Result<(), ClaimError> {
        if self.shards == 0 || self.lease_ms == 0 || self.retention_secs == 0 || self.pool_size == 0
        {
            return Err(ClaimError::Invalid(
                "shards, lease_ms, retention_secs and pool_size must be positive",
            ));
        }
        if self.shards > MAX_SHARDS {
            return Err(ClaimError::Invalid("shards must be at most 4096"));
        }
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Err(ClaimError::Invalid(
                "key prefix must be set, without braces",
            ));
        }
        Ok(())
    }
}
