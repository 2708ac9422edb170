//! Reward tokens: what the user holds until the reward is credited.
//!
//! A token is the protobuf [`proto::v1::RewardToken`], sealed with AES-256-GCM under a
//! per-minute subkey of a rotating master key and bound to its user and activity, then
//! base64url-encoded (see [`seal`] for the format and the nonce bound). The same ring
//! signs the events the pipeline carries, so a consumer can have the service refuse
//! one nobody with the keys issued ([`proof`]).
//!
//! ```
//! use proto::v1::RewardToken;
//! use sdk::token::{Illegal, KeyRing, TokenCodec};
//!
//! let codec = TokenCodec::new(KeyRing::random(1));
//! let token = RewardToken {
//!     trade_no: "cny:rain:r1:u42".into(),
//!     user_id: "u42".into(),
//!     activity_id: "cny".into(),
//!     reward_type: "cash".into(),
//!     amount: 888,
//!     ..Default::default()
//! };
//! let sealed = codec.seal(&token).unwrap();
//! assert_eq!(codec.open(&sealed, "u42", "cny").unwrap(), token);
//! // Presented for another user, it does not open.
//! assert_eq!(codec.open(&sealed, "u43", "cny"), Err(Illegal::Forged));
//! ```

pub mod keyring;
pub mod proof;
pub mod seal;
#[cfg(test)]
mod tests;

pub use keyring::{KeyId, KeyRing, KeyRingError};
pub use seal::{Illegal, SealError, TokenCodec};

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
