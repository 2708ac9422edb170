//! What `send_reward` hands back for a reward it accepted.

/// A reward accepted by the SDK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    /// The sealed token (base64url) to show and give to the user.
    pub token: String,
    /// The reward's trade number.
    pub trade_no: String,
    /// The virtual queue the event went to.
    pub queue: String,
    /// What became of the token's write to the store by the time the call returned.
    pub stored: Stored,
}

/// What became of a token's write to the store when `send_reward` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// Redis confirmed it (direct mode, the default, and batched mode).
    Yes,
    /// The first attempt failed (batched mode, not strict); the write is retried in
    /// the background until it lands or `store.retry_for_ms` passes.
    Retrying,
    /// Handed to the store's writer without waiting (`store.write_mode =
    /// "deferred"`, an opt-in); retried in the background if Redis fails, lost if the
    /// process dies first.
    Deferred,
}
