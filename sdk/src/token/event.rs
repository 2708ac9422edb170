//! The event a token stands for.

/// The event a token stands for: what the reward service's sweeper and a wallet
/// withdrawal grant when the reward's own event is gone or late. It carries what the
/// token does (its expiry too); a token holds no device id, so the event has none.
///
/// ```
/// use proto::v1::RewardToken;
/// let t = RewardToken { trade_no: "t1".into(), user_id: "u".into(), amount: 5, expires_at_ms: 9, ..Default::default() };
/// let ev = sdk::token::event_of(&t);
/// assert_eq!((ev.trade_no.as_str(), ev.amount, ev.expires_at_ms), ("t1", 5, 9));
/// ```
pub fn event_of(t: &proto::v1::RewardToken) -> proto::v1::RewardEvent {
    proto::v1::RewardEvent {
        trade_no: t.trade_no.clone(),
        user: Some(proto::v1::UserInfo {
            user_id: t.user_id.clone(),
            app_id: t.app_id.clone(),
            ..Default::default()
        }),
        activity_id: t.activity_id.clone(),
        scene_id: t.scene_id.clone(),
        reward_type: t.reward_type.clone(),
        amount: t.amount,
        created_at_ms: t.grant_time_ms,
        description: t.description.clone(),
        expires_at_ms: t.expires_at_ms,
        ..Default::default()
    }
}
