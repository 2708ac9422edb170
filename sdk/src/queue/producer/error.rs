//! Why a producer's send failed.

/// Why a send failed. Every failure is retryable from the SDK's point of view: the
/// event goes to the other broker, then to the retry loop, then to the spool.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{producer}: {reason}")]
pub struct ProduceError {
    /// The producer's name.
    pub producer: String,
    /// What the client library said.
    pub reason: String,
}
