//! The wire result of a grant: each outcome or failure as a `GrantResult` with its
//! outcome, error code, message and retry hint, and the count of results by outcome.

use proto::v1::{GrantOutcome, GrantResult};

use crate::claim::ClaimError;
use crate::grant::{GrantError, Outcome};

/// A result with only the trade number and the outcome set.
pub(super) fn result(trade_no: &str, outcome: GrantOutcome) -> GrantResult {
    GrantResult {
        trade_no: trade_no.to_string(),
        outcome: outcome as i32,
        ..Default::default()
    }
}

/// A result with an error code and a message.
pub(super) fn failed(
    trade_no: &str,
    outcome: GrantOutcome,
    code: &str,
    message: String,
) -> GrantResult {
    GrantResult {
        error_code: code.into(),
        message,
        ..result(trade_no, outcome)
    }
}

/// Counts grant results by API and outcome (`reward_service_grants_total`): tallied
/// per batch first, so the metrics registry is asked once per outcome seen, not once
/// per grant (a labelled counter lookup hashes its labels every time). `created` holds
/// each result's event creation time (`created_at_ms`, in the results' order; empty
/// when the API has no events): every first credit (`GRANTED`) records the event's
/// age at its answer in `reward_service_event_age_seconds`, the end-to-end latency
/// an SLO judges (an SDK host's clock ahead of this one counts as age 0).
pub fn count_outcomes(api: &'static str, results: &[GrantResult], created: &[i64]) {
    if !created.is_empty() {
        let now = reward_runtime::clock::now_ms();
        let granted = GrantOutcome::Granted as i32;
        let mut ages = results
            .iter()
            .zip(created)
            .filter(|(r, c)| r.outcome == granted && **c > 0)
            .map(|(_, c)| now.saturating_sub(*c).max(0) as f64 / 1000.0)
            .peekable();
        if ages.peek().is_some() {
            let h = metrics::histogram!("reward_service_event_age_seconds", "api" => api);
            for age in ages {
                h.record(age);
            }
        }
    }
    let mut tally: Vec<(i32, u64)> = Vec::new();
    for r in results {
        match tally.iter_mut().find(|(o, _)| *o == r.outcome) {
            Some((_, n)) => *n += 1,
            None => tally.push((r.outcome, 1)),
        }
    }
    for (outcome, n) in tally {
        let outcome = GrantOutcome::try_from(outcome).map_or("UNKNOWN", |o| o.as_str_name());
        metrics::counter!("reward_service_grants_total", "api" => api, "outcome" => outcome)
            .increment(n);
    }
}

/// The wire result of a grant.
pub fn result_of(trade_no: &str, r: Result<Outcome, GrantError>) -> GrantResult {
    match r {
        Ok(outcome) => outcome_result(trade_no, outcome),
        Err(e) => error_result(trade_no, e),
    }
}

/// The wire result of a grant that came to an outcome.
fn outcome_result(trade_no: &str, outcome: Outcome) -> GrantResult {
    match outcome {
        Outcome::Granted { receipt, duplicate } => GrantResult {
            downstream_ref: receipt,
            ..result(
                trade_no,
                if duplicate {
                    GrantOutcome::Duplicate
                } else {
                    GrantOutcome::Granted
                },
            )
        },
        Outcome::LeaseLost { receipt } => GrantResult {
            downstream_ref: receipt,
            error_code: "LEASE_LOST".into(),
            message: "credited after the claim's lease expired; another worker owns the \
                      record and calls the downstream with the same idempotency key"
                .into(),
            ..result(trade_no, GrantOutcome::Granted)
        },
        Outcome::RetryLater {
            reason,
            code,
            after_ms,
        } => {
            let (outcome, code) = match code {
                Some(c) => (GrantOutcome::FailedRetryable, c.as_str()),
                None => (GrantOutcome::RetryLater, "LEASE_HELD"),
            };
            GrantResult {
                retry_after_ms: i64::try_from(after_ms).unwrap_or(i64::MAX),
                ..failed(trade_no, outcome, code, reason)
            }
        }
        Outcome::BudgetHeld { after_ms } => GrantResult {
            retry_after_ms: i64::try_from(after_ms).unwrap_or(i64::MAX),
            ..failed(
                trade_no,
                GrantOutcome::RetryLater,
                "BUDGET_HELD",
                format!(
                    "the scene's budget is being changed, or its last units are being moved between shards; nothing was claimed: send it again in {after_ms} ms"
                ),
            )
        },
        Outcome::InDoubt { reason } => failed(trade_no, GrantOutcome::InDoubt, "IN_DOUBT", reason),
        Outcome::FailedPermanent { reason, code } => failed(
            trade_no,
            GrantOutcome::FailedPermanent,
            code.map_or("FAILED_BEFORE", |c| c.as_str()),
            reason,
        ),
        Outcome::Conflict => failed(
            trade_no,
            GrantOutcome::Conflict,
            "CONFLICT",
            "the trade number is known with another user, type, amount or scene".into(),
        ),
        Outcome::BudgetExhausted => failed(
            trade_no,
            GrantOutcome::BudgetExhausted,
            "BUDGET_EXHAUSTED",
            "no room left in this trade number's budget shard".into(),
        ),
        Outcome::NoBudget => failed(
            trade_no,
            GrantOutcome::BudgetExhausted,
            "NO_BUDGET",
            "the scene has no budget".into(),
        ),
    }
}

/// The wire result of a grant the store or the archive failed.
fn error_result(trade_no: &str, e: GrantError) -> GrantResult {
    match e {
        GrantError::Claim(ClaimError::Invalid(why)) => {
            failed(trade_no, GrantOutcome::Invalid, "INVALID", why.to_string())
        }
        e @ GrantError::Claim(_) => GrantResult {
            retry_after_ms: 1_000,
            ..failed(
                trade_no,
                GrantOutcome::FailedRetryable,
                "STORE_UNAVAILABLE",
                e.to_string(),
            )
        },
        // The grant is marked failed and refunded; only its archive line is missing.
        e @ GrantError::Archive { .. } => failed(
            trade_no,
            GrantOutcome::FailedPermanent,
            "ARCHIVE_FAILED",
            e.to_string(),
        ),
    }
}
