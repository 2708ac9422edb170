//! Why `send_reward` refused a reward, and why the SDK did not start.

use crate::config::ConfigError;
use crate::queue::{self, EnqueueError};
use crate::request::RequestError;
use crate::spool;
use crate::store::StoreError;
use crate::token::{KeyRingError, SealError};

/// What pushed back on a `send_reward`: slow down or retry later.
#[derive(Debug, thiserror::Error)]
pub enum Pushback {
    /// The reward type's virtual queue stayed full for the whole wait.
    #[error(transparent)]
    Queue(EnqueueError),
    /// The token writer is behind Redis ([`StoreError::Backlog`]).
    #[error(transparent)]
    TokenWrites(StoreError),
}

/// Why `send_reward` refused a reward. Nothing was sent for it, except after
/// [`SendError::InDoubt`] (its event is on its way) and, in doubt, after
/// [`SendError::Store`] (a token write whose answer was lost may have landed).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The request is malformed.
    #[error(transparent)]
    Invalid(#[from] RequestError),
    /// The event queue or the token writer stayed full for the whole wait
    /// (`batch.enqueue_wait_ms`): slow down or retry later. Nothing was kept.
    #[error(transparent)]
    Backpressure(Pushback),
    /// `close` has begun.
    #[error("the SDK is closing")]
    Closed,
    /// The user holds the most tokens allowed in this activity.
    #[error("user holds {cap} tokens in this activity already")]
    TooManyTokens {
        /// The cap.
        cap: u32,
    },
    /// The token store failed: Redis refused the command itself (definite: nothing
    /// stored), or, with `store.strict`, the first attempt failed, or in direct mode
    /// attempts failed for the whole `store.write_wait_ms`. The last two are in
    /// doubt: an attempt whose answer was lost (a timeout, a reset connection) may
    /// still have stored the token, and such a reward is then credited (the sweeper)
    /// and listed in the user's wallet. Send it again with the same trade number for
    /// a definite answer (the same reward issued twice is one token), or treat it as
    /// in doubt.
    #[error(transparent)]
    Store(StoreError),
    /// In doubt, with its event sent (`store.answer_from_queue` only): Redis did not
    /// store the token within `store.write_wait_ms`, so the reward's event was handed
    /// to the queue, and neither a broker nor the spool confirmed it in that time
    /// either. The event is still on its way (to a broker, else the spool) and the
    /// token write goes on in the background, so the reward will most likely be
    /// credited and listed in the user's wallet. Send it again with the same trade
    /// number for a definite answer: the resend is answered as any call (`stored`
    /// once Redis holds the token, `queued`/`spooled` from its own event), and the
    /// reward is still credited once, whichever of its events arrives first.
    #[error("in doubt: the event is on its way but no store confirmed the reward in time ({0})")]
    InDoubt(StoreError),
    /// The clock is before 1970 or past 2106: no token can be sealed.
    #[error(transparent)]
    Seal(#[from] SealError),
}

impl From<EnqueueError> for SendError {
    fn from(e: EnqueueError) -> Self {
        match e {
            EnqueueError::Closed => SendError::Closed,
            other => SendError::Backpressure(Pushback::Queue(other)),
        }
    }
}

/// Why the SDK did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The key ring is missing or malformed.
    #[error("token keys: {0}")]
    Keys(#[from] KeyRingError),
    /// Redis is unreachable.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A producer could not be created.
    #[error(transparent)]
    Producer(#[from] queue::ProduceError),
    /// The spool directory is unusable.
    #[error(transparent)]
    Spool(#[from] spool::SpoolError),
    /// The configuration is inconsistent.
    #[error(transparent)]
    Config(#[from] ConfigError),
}
