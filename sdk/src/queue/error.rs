//! Why the queue did not accept an event.

use std::time::Duration;

/// Why an event was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnqueueError {
    /// The queue's buffer stayed full for the whole wait.
    #[error("queue {queue} is full ({capacity} events) for {waited:?}")]
    Backpressure {
        /// The queue.
        queue: String,
        /// Its capacity.
        capacity: usize,
        /// How long the call waited.
        waited: Duration,
    },
    /// `close` has begun.
    #[error("the SDK is closing")]
    Closed,
    /// The routing names a queue that has no buffer (it appeared after start-up).
    #[error("queue {0} was not configured at start-up")]
    UnknownQueue(String),
}
