//! One grant as the claim store sees it.

/// One grant as the claim store sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Budget scope (the service uses `activity/scene`, see [`crate::service`]).
    pub scene: String,
    /// The activity the reward was won in (kept in the record, used to find the
    /// user's token once credited).
    pub activity_id: String,
    /// The global idempotency key.
    pub trade_no: String,
    /// Who is credited.
    pub user_id: String,
    /// What is credited.
    pub reward_type: String,
    /// How much (in the reward type's smallest unit).
    pub amount: i64,
}
