//! What settles a write's answer when it is not stored: a retry in the background with
//! capped exponential backoff, or a give-up after `retry_for_ms`, counted and logged.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::answer::{Submitted, outcome, transient};
use super::error::StoreError;
use super::pending::{Reply, Shared, Write};

/// First retry delay of a failed write; doubles per attempt up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// Longest delay between two attempts of a write.
const RETRY_MAX: Duration = Duration::from_secs(2);

/// A caller's write whose first attempt has not been settled; dropped unsettled (the
/// caller gave up mid-attempt), it goes to the background as a retry.
pub(super) struct Unsettled<'a> {
    pub(super) shared: &'a Arc<Shared>,
    pub(super) write: Option<Write>,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if let Some(mut w) = self.write.take() {
            w.attempts += 1;
            let sent = match self.shared.requeue.upgrade() {
                Some(tx) => tx.send(w).is_ok(),
                None => false,
            };
            if !sent {
                give_up(self.shared, 1, &StoreError::Closed);
            }
        }
    }
}

/// What a write's answer means, counted; retries a Redis failure unless a waiting
/// caller in strict mode takes the error. `caller` is true for a caller's own first
/// attempt (it hears cap refusals and, in strict mode, failures).
pub(super) fn settle(
    shared: &Arc<Shared>,
    mut w: Write,
    reply: Result<i64, fred::error::Error>,
    caller: bool,
) -> Result<Submitted, StoreError> {
    let cfg = &shared.cfg;
    let permanent = matches!(&reply, Err(e) if !transient(e));
    match outcome(reply, cfg.max_tokens_per_user, &shared.stats) {
        Ok(()) => Ok(Submitted::Stored),
        Err(e @ StoreError::CapReached { .. }) => {
            if !caller {
                // Nobody to refuse: the reward went on without its token.
                shared.stats.unstored.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("reward_sdk_token_write_failures_total").increment(1);
            }
            Err(e)
        }
        // A waiting caller hears a strict-mode failure, and a refusal of the command
        // itself (sending it again cannot help): its reward is refused, so nothing is
        // counted as unstored.
        Err(e) if caller && (cfg.strict || permanent) => Err(e),
        Err(e) => {
            // A caller's own first attempt is always retried once more, however long
            // it took: only the background gives up.
            let retry_for = Duration::from_millis(cfg.retry_for_ms);
            if !caller && (permanent || w.first.elapsed() >= retry_for) {
                give_up(shared, 1, &e);
                return Err(e);
            }
            w.done = Reply::Background;
            w.attempts += 1;
            let delay = backoff(w.attempts);
            let shared = shared.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let sent = match shared.requeue.upgrade() {
                    Some(tx) => tx.send(w).is_ok(),
                    None => false,
                };
                if !sent {
                    give_up(&shared, 1, &StoreError::Closed);
                }
            });
            Ok(Submitted::Retrying)
        }
    }
}

/// Counts `n` writes as never to be stored, with one log line.
pub(super) fn give_up(shared: &Shared, n: u64, e: &StoreError) {
    shared.stats.unstored.fetch_add(n, Ordering::Relaxed);
    metrics::counter!("reward_sdk_token_write_failures_total").increment(n);
    if !shared.may_log() {
        return;
    }
    tracing::warn!(
        writes = n,
        error = %e,
        retry_for_ms = shared.cfg.retry_for_ms,
        total_given_up = shared.stats.unstored.load(Ordering::Relaxed),
        "token writes given up (Redis refused the command, or retry_for_ms passed); their rewards went on without a stored token"
    );
}

/// The delay before attempt `attempts` (2 or more): 100 ms doubling to 2 s, then a
/// random 50-100 % of it so a fleet of SDKs does not retry in step.
fn backoff(attempts: u32) -> Duration {
    let exp = attempts.saturating_sub(2).min(8);
    let full = RETRY_FIRST.saturating_mul(1 << exp).min(RETRY_MAX);
    full.mul_f64(rand::random_range(0.5..=1.0))
}
