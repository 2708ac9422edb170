//! An event as a grant: its budget scope, its checks and its expiry.

use proto::v1::RewardEvent;

use crate::claim::Grant;

/// The budget scope of an activity's scene.
pub fn scope(activity_id: &str, scene_id: &str) -> String {
    format!("{activity_id}/{scene_id}")
}

/// Checks an event and turns it into a grant; the error is the reason for `INVALID`.
/// Every field follows the pipeline's one set of limits (`proto::limits`, ids by
/// `proto::ids`), the same the SDK applies.
pub fn grant_of(ev: &RewardEvent) -> Result<Grant, String> {
    let user_id = ev.user.as_ref().map(|u| u.user_id.as_str()).unwrap_or("");
    proto::limits::check_event(ev).map_err(|e| e.to_string())?;
    Ok(Grant {
        scene: scope(&ev.activity_id, &ev.scene_id),
        activity_id: ev.activity_id.clone(),
        trade_no: ev.trade_no.clone(),
        user_id: user_id.to_string(),
        reward_type: ev.reward_type.clone(),
        amount: ev.amount,
    })
}

/// Whether the reward is past its own expiry at `now_ms`.
pub fn expired(expires_at_ms: i64, now_ms: i64) -> bool {
    expires_at_ms > 0 && now_ms >= expires_at_ms
}
