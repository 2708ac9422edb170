//! The entry point: the stores read and checked against what was expected, and
//! whether a failure was a store that did not answer.

use std::collections::HashMap;

use super::{Check, Expected, Reconciliation, Stores, checks, read};

/// Reads the stores `at` names and checks them against `expected`. Store errors
/// name the store (see [`unanswered`]).
pub async fn check(at: &Stores, expected: &Expected) -> anyhow::Result<Reconciliation> {
    let no_marks = HashMap::new();
    let marks = expected.excused.as_ref().map_or(&no_marks, |e| &e.rewards);
    let (ledger, claims, tokens) = read::connect(at).await?;
    let t = read::tally(&expected.sent, marks, &ledger, &tokens).await?;
    let n = expected.sent.len() as u64;
    let mut checks = checks::ledger_checks(&t, n, expected.repeats, expected.conflicts);
    checks.push(checks::budget_check(&expected.budgets, &claims, &t.credited_by_scope).await?);
    checks.push(checks::tokens_check(&t, expected.token_write_failures));
    if let Some(ex) = expected.excused.as_ref().filter(|e| !e.rewards.is_empty()) {
        checks.push(Check {
            name: "lost with a killed host".into(),
            pass: t.lost_with_host + t.token_lost_with_host <= ex.bound,
            detail: format!(
                "{} of {} rewards left in doubt (by a killed SDK host, or refused after a token write's answer was lost) neither stored nor credited ({} answered before their token write, {} unanswered), {} credited without their token; at most {} token writes were unfinished in them",
                t.lost_with_host,
                ex.rewards.len(),
                t.lost_answered,
                t.lost_with_host - t.lost_answered,
                t.token_lost_with_host,
                ex.bound
            ),
        });
    }
    Ok(Reconciliation {
        checks,
        sent: n,
        repeats: expected.repeats,
        credited: t.credited,
        sent_amount: expected.sent.values().map(|r| r.amount).sum(),
        tokens_missing: t.token_missing,
        lost_with_host: t.lost_with_host,
        lost_answered: t.lost_answered,
        lost_unanswered: t.lost_with_host - t.lost_answered,
        host_marked: marks.len() as u64,
        credit_delays_ms: t.delays,
        tokens_missing_sent_ms: t.token_missing_sent_ms,
    })
}

/// Whether [`check`] failed because a store did not answer (its errors name the
/// store), so that asking again may succeed; a check that fails is an answer, not an
/// error.
pub fn unanswered(e: &anyhow::Error) -> bool {
    let text = format!("{e:#}");
    ["token store:", "ledger:", "claim store:"]
        .iter()
        .any(|p| text.starts_with(p))
}
