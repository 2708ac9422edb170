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

mod event;
pub mod keyring;
pub mod proof;
pub mod seal;
#[cfg(test)]
mod tests;

pub use event::event_of;
pub use keyring::{KeyId, KeyRing, KeyRingError};
pub use seal::{Illegal, SealError, TokenCodec};
