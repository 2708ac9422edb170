//! What Redis's answer to a token write means: stored, capped, credited already, or a
//! failure worth sending again or not.

use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use fred::prelude::*;
use reward_runtime::counters::Counted;

use super::error::StoreError;
use super::stats::StoreStats;

/// What became of a write handed to
/// [`TokenStore::submit`](super::TokenStore::submit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// Redis confirmed it.
    Stored,
    /// The first attempt failed (batched mode); it is being retried in the background.
    Retrying,
    /// Handed to the writer without waiting (deferred mode).
    Deferred,
}

/// Tokens Redis acknowledged storing (every write mode).
static TOKENS_STORED: LazyLock<Counted> =
    LazyLock::new(|| Counted::new("reward_sdk_tokens_stored_total", &[]));

/// What one script call's reply means for the caller, counted.
pub(super) fn outcome(
    reply: Result<i64, fred::error::Error>,
    cap: u32,
    stats: &StoreStats,
) -> Result<(), StoreError> {
    match reply {
        // 2: already credited, nothing to store; the reward's token has done its job.
        Ok(1 | 2) => {
            stats.written.fetch_add(1, Ordering::Relaxed);
            TOKENS_STORED.inc();
            Ok(())
        }
        Ok(_) => {
            stats.capped.fetch_add(1, Ordering::Relaxed);
            Err(StoreError::CapReached { cap })
        }
        Err(e) => {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            Err(StoreError::from(e))
        }
    }
}

/// Whether a failed attempt may succeed if sent again: a timeout, a dropped
/// connection, a busy, loading or failing-over server. A refusal of the command itself
/// (wrong type under the key, a malformed argument) fails the same way every time.
pub(super) fn transient(e: &fred::error::Error) -> bool {
    use fred::error::ErrorKind as K;
    !matches!(
        e.kind(),
        K::InvalidArgument | K::InvalidCommand | K::Parse | K::Url | K::Config
    )
}

/// One write's reply in a [`WRITE_MANY_LUA`](super::life::WRITE_MANY_LUA) answer: its code, or the text of the
/// command Redis refused for it. A key of another type (`WRONGTYPE`) fails the same way
/// every time it is sent, so it is not retried (the kind a refused single script call
/// gets); anything else Redis can refuse mid-script (out of memory, a replica that
/// became read-only in a failover) passes, so it is retried like a lost connection.
pub(super) fn write_reply(item: Value) -> Result<i64, fred::error::Error> {
    match item {
        Value::Integer(n) => Ok(n),
        other => {
            let text = other.as_string().unwrap_or_else(|| format!("{other:?}"));
            let kind = if text.starts_with("WRONGTYPE") {
                fred::error::ErrorKind::InvalidArgument
            } else {
                fred::error::ErrorKind::Unknown
            };
            Err(fred::error::Error::new(kind, text))
        }
    }
}
