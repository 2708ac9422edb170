//! The checks: each turns the tally into one row of the PASS/FAIL table.

use std::collections::BTreeMap;

use reward_service::claim::Claims;

use super::Check;
use super::read::Tally;

/// The ledger's checks: credited once, nothing extra, amounts, no double credit.
pub(super) fn ledger_checks(t: &Tally, n: u64, repeats: u64, conflicts: u64) -> Vec<Check> {
    let (credited, missing, extra, wrong_balance, doubles) =
        (t.credited, t.missing, t.extra, t.wrong_balance, t.doubles);
    let examples = &t.examples;
    vec![
        Check {
            name: "credited once".into(),
            pass: missing == 0 && conflicts == 0,
            detail: format!(
                "{credited} of {n} trade numbers credited ({repeats} repeated sends); {missing} missing{}{}",
                if examples.is_empty() {
                    String::new()
                } else {
                    format!(" e.g. {}", examples.join(", "))
                },
                if conflicts > 0 {
                    format!("; {conflicts} repeats with another type/amount/user")
                } else {
                    String::new()
                }
            ),
        },
        Check {
            name: "nothing extra".into(),
            pass: extra == 0,
            detail: format!("{extra} credited trade numbers that were never sent"),
        },
        Check {
            name: "amounts".into(),
            pass: wrong_balance == 0,
            detail: format!("{wrong_balance} user balances differ from the sum sent"),
        },
        Check {
            name: "no double credit".into(),
            pass: doubles == 0,
            detail: format!("{doubles} double-credit incidents in the ledger"),
        },
    ]
}

/// The budget check: per scene, spent (read from the claim store) equals the credits
/// of that scene and is within its budget.
pub(super) async fn budget_check(
    budgets: &BTreeMap<String, i64>,
    claims: &Claims,
    credited_by_scope: &BTreeMap<String, i64>,
) -> anyhow::Result<Check> {
    let mut budget_ok = true;
    let mut budget_detail = Vec::new();
    for (scope, budget) in budgets {
        let spent = claims
            .spent(scope)
            .await
            .map_err(|e| anyhow::anyhow!("budget {scope}: {e}"))?;
        let credits = credited_by_scope.get(scope).copied().unwrap_or(0);
        if spent != credits || spent > *budget {
            budget_ok = false;
        }
        budget_detail.push(format!(
            "{scope}: spent {spent}, credited {credits}, budget {budget}"
        ));
    }
    Ok(Check {
        name: "budget".into(),
        pass: budget_ok,
        detail: budget_detail.join("; "),
    })
}

/// The tokens check: no sent trade without its token (beyond the write failures
/// counted), no token for a trade not sent.
pub(super) fn tokens_check(t: &Tally, token_write_failures: u64) -> Check {
    let (token_missing, token_unmoved, token_unsent) =
        (t.token_missing, t.token_unmoved, t.token_unsent);
    Check {
        name: "tokens".into(),
        pass: token_missing <= token_write_failures && token_unsent == 0,
        detail: format!(
            "{token_missing} sent without a stored token ({} write failures counted), {token_unmoved} credited still pending (move failed), {token_unsent} tokens for trades not sent{}",
            token_write_failures,
            if t.lost_with_host > 0 {
                format!("; {} lost with a killed SDK host", t.lost_with_host)
            } else {
                String::new()
            }
        ),
    }
}
