//! Reconciliation of a replay: after it (or on its own, `loadtest reconcile <run
//! dir>`), the run's books checked from Redis (`reward_tools::books`, which holds the
//! checks and says what each proves).
//!
//! Inputs are the run directory's `manifest.json` (where the data lives, the budgets,
//! the token writes the SDK counted as failed), `sent.tsv` (every request the SDK
//! accepted) and `hosts.tsv` (the rewards of killed SDK hosts,
//! [`crate::marks`], excused as the books' check allows).

use std::path::Path;

pub use reward_tools::books::{Check, Reconciliation, SentReward};
use reward_tools::books::{Excused, Expected, Stores};

use crate::setup::Manifest;

/// Reads the run's `sent.tsv`: distinct trade numbers (first send kept), the repeat
/// count and the conflicting repeats.
pub fn read_sent(
    dir: &Path,
) -> anyhow::Result<(std::collections::BTreeMap<String, SentReward>, u64, u64)> {
    reward_tools::books::read_sent(&dir.join("sent.tsv"))
}

/// How often a replay's final reconciliation is tried before it fails the run.
pub const ATTEMPTS: u32 = 3;

/// [`run`], tried again (2 s apart, up to [`ATTEMPTS`] times) when Redis does not
/// answer: reconciliation only reads, so a read that timed out on a busy machine
/// (beside a replay that overloads it on purpose, or a Redis still loading its AOF)
/// is asked again rather than failing the run. A check that fails is an answer, not
/// an error, and is never retried.
pub async fn run_patiently(dir: &Path) -> anyhow::Result<Reconciliation> {
    let mut attempt = 1;
    loop {
        match run(dir).await {
            Ok(r) => return Ok(r),
            Err(e) if attempt < ATTEMPTS && reward_tools::books::unanswered(&e) => {
                eprintln!(
                    "reconcile: {e:#}; reading again in 2 s (attempt {attempt} of {ATTEMPTS})"
                );
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Checks the run's books against Redis.
pub async fn run(dir: &Path) -> anyhow::Result<Reconciliation> {
    let m = Manifest::load(dir)?;
    if let Some(at) = m.cleaned_unix_ms {
        anyhow::bail!(
            "nothing to reconcile: `loadtest clean` removed this run's keys (at Unix ms {at}); \
             its report.json keeps the result of the reconciliation made after the run"
        );
    }
    let (sent, repeats, conflicts) = read_sent(dir)?;
    let marks = crate::marks::read_marks(dir)?;
    let at = Stores {
        redis_url: m.redis_url.clone(),
        ledger_redis_url: m.ledger_redis().to_string(),
        token_prefix: m.token_prefix.clone(),
        claims_prefix: m.claims_prefix.clone(),
        claims_shards: m.claims_shards,
        ledger_prefix: m.ledger_prefix.clone(),
    };
    let expected = Expected {
        sent,
        repeats,
        conflicts,
        budgets: m.budgets.clone(),
        token_write_failures: m.token_write_failures,
        excused: (!marks.rewards.is_empty()).then_some(Excused {
            rewards: marks.rewards,
            bound: marks.bound,
        }),
    };
    reward_tools::books::check(&at, &expected).await
}
