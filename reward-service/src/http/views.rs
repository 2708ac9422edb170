//! What the wallet sees in JSON: a token, a check, a grant's result, the page.

use std::collections::BTreeMap;

use proto::v1::{GrantOutcome, GrantResult, RewardToken, TokenValidity};
use serde::Serialize;
use serde_json::json;

use crate::service::{Checked, Rewards};

/// A token as the wallet sees it.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct TokenView {
    trade_no: String,
    activity_id: String,
    scene_id: String,
    reward_type: String,
    amount: i64,
    description: String,
    grant_time_ms: i64,
    expires_at_ms: i64,
}

impl From<&RewardToken> for TokenView {
    fn from(t: &RewardToken) -> Self {
        Self {
            trade_no: t.trade_no.clone(),
            activity_id: t.activity_id.clone(),
            scene_id: t.scene_id.clone(),
            reward_type: t.reward_type.clone(),
            amount: t.amount,
            description: t.description.clone(),
            grant_time_ms: t.grant_time_ms,
            expires_at_ms: t.expires_at_ms,
        }
    }
}

pub(super) fn validity(v: TokenValidity) -> &'static str {
    match v {
        TokenValidity::Legal => "legal",
        TokenValidity::Unknown => "unknown",
        TokenValidity::Expired => "expired",
        _ => "illegal",
    }
}

pub(super) fn outcome(o: i32) -> &'static str {
    match GrantOutcome::try_from(o).unwrap_or(GrantOutcome::Unspecified) {
        GrantOutcome::Granted => "granted",
        GrantOutcome::Accepted => "accepted",
        GrantOutcome::Duplicate => "duplicate",
        GrantOutcome::Conflict => "conflict",
        GrantOutcome::RetryLater => "retry_later",
        GrantOutcome::BudgetExhausted => "budget_exhausted",
        GrantOutcome::FailedRetryable => "failed_retryable",
        GrantOutcome::FailedPermanent => "failed_permanent",
        GrantOutcome::Invalid => "invalid",
        GrantOutcome::InDoubt => "in_doubt",
        GrantOutcome::Unspecified => "unspecified",
    }
}

pub(super) fn result_json(r: &GrantResult) -> serde_json::Value {
    json!({
        "trade_no": r.trade_no,
        "outcome": outcome(r.outcome),
        "downstream_ref": r.downstream_ref,
        "error_code": r.error_code,
        "message": r.message,
        "retry_after_ms": r.retry_after_ms,
    })
}

pub(super) fn checked_json(c: &Checked) -> serde_json::Value {
    let mut v = json!({
        "validity": validity(c.validity),
        "credited": c.credited,
        "creditable": c.creditable,
    });
    if let Some(t) = &c.token {
        v["token"] = json!(TokenView::from(t));
    }
    if let Some(r) = &c.reason {
        v["reason"] = json!(r);
    }
    v
}

pub(super) fn page_json(user_id: &str, activity_id: &str, r: &Rewards) -> serde_json::Value {
    let views = |ts: &[RewardToken]| ts.iter().map(TokenView::from).collect::<Vec<_>>();
    let balance: BTreeMap<&str, serde_json::Value> = r
        .balance
        .iter()
        .map(|(ty, (p, c))| {
            (
                ty.as_str(),
                json!({"pending": p, "credited": c, "total": p.saturating_add(*c)}),
            )
        })
        .collect();
    json!({
        "user_id": user_id,
        "activity_id": activity_id,
        "pending": r.pending.iter().map(|t| {
            let mut v = json!(TokenView::from(t));
            if let Some(sealed) = r.sealed.get(&t.trade_no) {
                v["sealed"] = json!(sealed);
            }
            v
        }).collect::<Vec<_>>(),
        "credited": views(&r.credited),
        "unknown": views(&r.unknown),
        "illegal": r.illegal,
        "unreadable": r.unreadable,
        "expired": r.expired,
        "expired_trade_nos": r.expired_trade_nos,
        "refused": r.refused,
        "refused_trade_nos": r.refused_trade_nos,
        "balance": balance,
    })
}
