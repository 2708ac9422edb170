//! Why a measured run failed: the baseline's, or a bench's run that it is set against.

/// Why a measured run failed (its set-up, or it lost or refused events).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Setting up (topics, producer) failed.
    #[error("set-up: {0}")]
    Setup(String),
    /// A run lost or refused events: its rate would be meaningless.
    #[error("{run}: {what}")]
    Incomplete {
        /// Which run.
        run: &'static str,
        /// What went wrong.
        what: String,
    },
}
