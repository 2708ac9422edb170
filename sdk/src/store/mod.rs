//! The token store: every token the SDK mints, kept in Redis so the wallet can list
//! and validate what a user won even if the client lost it.
//!
//! - [`keys`]: every key, member and pattern of the store: one hash per user and
//!   activity, and the due index the reward service's sweeper reads;
//! - [`life`]: a token's states in its field, who moves it from one to the next, and
//!   the scripts that do;
//! - [`layout`]: the due index's shard count, pinned at first use and proven from the
//!   index's data when its pin is lost;
//! - [`TokenStore`]: the handle; how writes travel (direct, batched, deferred), what
//!   happens when Redis is slow or failing, and back-pressure are in its doc;
//!   [`StoreError`], [`Submitted`], [`Held`], [`StoreStats`] go with it.

mod answer;
mod combine;
mod error;
pub mod keys;
pub mod layout;
pub mod life;
mod pending;
mod retry;
mod start;
mod stats;
mod token_store;
mod writer;

pub use self::answer::Submitted;
pub use self::error::StoreError;
pub use self::keys::parse_due_member;
pub use self::pending::Held;
pub use self::stats::StoreStats;
pub use self::token_store::TokenStore;
