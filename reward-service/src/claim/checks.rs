//! The checks of what a claim writes into keys and records, and the small values a
//! claim sends along (its owner id, a TTL).

use fred::prelude::*;

use super::error::ClaimError;
use super::grant::Grant;

/// The largest amount or budget: every integer up to it is exact in the scripts'
/// double-precision numbers, and so is every comparison against it.
pub const MAX_AMOUNT: i64 = (1 << 53) - 1;

/// Longest trade number accepted (it becomes part of a key): the pipeline's limit.
const MAX_TRADE_NO: usize = proto::limits::MAX_TRADE_NO_LEN;
/// Longest scene: a budget scope `activity/scene` of two ids.
const MAX_SCENE: usize = 2 * proto::ids::MAX_ID_LEN + 1;

/// Checks what a claim writes into keys and records.
pub(super) fn check_grant(g: &Grant) -> Result<(), ClaimError> {
    check_id("scene", &g.scene)?;
    check_id("trade number", &g.trade_no)?;
    if g.user_id.is_empty() || g.reward_type.is_empty() {
        return Err(ClaimError::Invalid("user id and reward type must be set"));
    }
    // A record is one line a field (module doc, "Records").
    if [&g.user_id, &g.reward_type, &g.activity_id]
        .iter()
        .any(|f| f.contains('\n'))
    {
        return Err(ClaimError::Invalid(
            "user id, reward type and activity may not hold a line break",
        ));
    }
    if g.amount <= 0 || g.amount > MAX_AMOUNT {
        return Err(ClaimError::Invalid("amount must be in 1..=2^53-1"));
    }
    Ok(())
}

pub(super) fn new_claim_id() -> String {
    format!(
        "{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    )
}

pub(super) fn check_id(what: &'static str, id: &str) -> Result<(), ClaimError> {
    let max = if what == "scene" {
        MAX_SCENE
    } else {
        MAX_TRADE_NO
    };
    if id.is_empty() || id.len() > max || id.contains(['{', '}', '\n']) {
        return Err(ClaimError::Invalid(what));
    }
    Ok(())
}

pub(super) fn secs(v: u64) -> Value {
    Value::from(i64::try_from(v).unwrap_or(i64::MAX))
}
