//! The in-process SDK that activity services link: a reward becomes an encrypted
//! token for the user at once, and an event for the pipeline.
//!
//! - [`Sdk`]: start from a [`config::SdkConfig`], [`Sdk::send_reward`], [`Sdk::close`].
//! - [`token`]: sealing and opening tokens (AES-256-GCM, rotating keys).
//! - [`store`]: the Redis token store (hash per user and activity).
//! - [`queue`]: the virtual queue over a primary and a backup broker.
//! - [`spool`]: the durable local spool for rewards no broker takes.
//! - [`config`]: the TOML configuration and its `REWARD_SDK__*` overrides; live
//!   changes come through [`reward_runtime::dynamic`] and [`check_dynamic`].
//! - [`request`]: reward requests, validation, scene helpers and trade numbers.
//!
//! # What `send_reward` does, in order
//! 1. validates the request and its reward type (typed [`SendError::Invalid`]);
//! 2. reserves room in the reward type's virtual queue and takes a place for its
//!    token write (both within `batch.enqueue_wait_ms`, then
//!    [`SendError::Backpressure`]: the queue or the token writer is behind);
//! 3. seals the token and writes it to the store. In the default
//!    (`store.write_mode = "direct"`) the call answers once Redis holds the token and
//!    its due-index entry ([`HeldBy::Store`]; where the reward was held is counted by
//!    path), or, with `store.answer_from_queue` (on by default) when Redis has not
//!    answered within `store.queue_after_ms` (20 ms), the event goes at once and the first to
//!    hold the reward answers: the token store, a broker acknowledging the event
//!    ([`HeldBy::Queue`]), or the host's synced spool when both brokers fail
//!    ([`HeldBy::Spool`]); the token write then goes on in the background
//!    ([`Stored::Retrying`]). A process that dies after answering loses nothing it
//!    showed (a spooled reward is sent when the host restarts; lost only with its
//!    disk). A user over the per-activity cap gets [`SendError::TooManyTokens`] when
//!    Redis answers within that head start. A reward no store holds within
//!    `store.write_wait_ms` of the call is refused in doubt: [`SendError::InDoubt`]
//!    when its event is on its way (most likely credited), [`SendError::Store`] when
//!    only its write may still land. In `batched` mode the call waits for its
//!    first attempt, and a failed one is retried in the background. In `deferred`
//!    mode (an opt-in that loses rewards when the process dies) the call does not wait
//!    for Redis at all ([`Stored::Deferred`]). With `store.strict` (direct and batched
//!    modes) a failed first attempt refuses the reward and no event goes;
//! 4. hands the event, signed under the token keys ([`token::proof`]) and carrying the
//!    token's expiry, to the queue (if step 3 has not) and returns the token.
//!
//! A refusal in steps 1-2, by the cap or in strict mode leaves nothing behind: the
//! place and the reserved slot are released, no event is sent, and a refused write
//! stores no token. Once the slot is reserved, handing the event over cannot fail, so a
//! stored token always has its event. What each write mode costs and gives up is in
//! [`store::TokenStore`]; tokens that were never stored are counted
//! ([`Sdk::token_write_failures`]) and reported by [`Sdk::close`].
//!
//! Metrics go through the `metrics` facade (names in `docs/metrics.md`): install the
//! process's recorder before the first reward is sent, or the SDK's counts reach
//! nothing (the handles are registered at their first event and kept).
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use sdk::{Sdk, config::SdkConfig, request::{RedEnvelopeRain, User}};
//!
//! let config = SdkConfig::load(std::path::Path::new("sdk.toml"))?;
//! let sdk = Sdk::builder(config).start().await?; // keys from REWARD_TOKEN_KEYS[_FILE]
//! let rain = RedEnvelopeRain::new("cny2027", "cash");
//! let issued = sdk.send_reward(rain.grab(&User::new("42"), 1, 888)).await?;
//! println!("show the user: {}", issued.token);
//! let report = sdk.close(std::time::Duration::from_secs(10)).await;
//! assert_eq!(report.left, 0);
//! # Ok(()) }
//! ```

mod calls;
pub mod config;
mod dynamic;
mod error;
mod handle;
mod issued;
pub mod queue;
pub mod request;
pub mod session;
pub mod spool;
mod start;
pub mod store;
pub mod token;

pub use crate::dynamic::check_dynamic;
pub use crate::error::{Pushback, SendError, StartError};
pub use crate::handle::Sdk;
pub use crate::issued::{HeldBy, IssuedToken, Stored};
pub use crate::start::SdkBuilder;
