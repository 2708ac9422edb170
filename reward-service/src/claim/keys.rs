//! Key naming (shard, hash tag, record, budget and doubt-index keys) and the checks
//! of what a claim writes into keys and records.

use fred::prelude::*;

use super::{ClaimError, Claims, Grant, MAX_AMOUNT};

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

impl Claims {
    /// The shard a trade number belongs to.
    pub fn shard_of(&self, trade_no: &str) -> u32 {
        crc32fast::hash(trade_no.as_bytes()) % self.cfg.shards
    }

    fn tag(&self, shard: u32) -> String {
        format!("{p}:{{{p}.{shard}}}", p = self.cfg.key_prefix)
    }

    /// The budget key of a scene's shard.
    pub fn budget_key(&self, scene: &str, shard: u32) -> String {
        format!("{}:b:{scene}", self.tag(shard))
    }

    /// The record key of a trade number (in its shard `shard_of(trade_no)`).
    pub fn record_key(&self, shard: u32, trade_no: &str) -> String {
        format!("{}:t:{trade_no}", self.tag(shard))
    }

    /// The doubt index of a shard.
    pub fn doubt_key(&self, shard: u32) -> String {
        format!("{}:doubt", self.tag(shard))
    }
}
