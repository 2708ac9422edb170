//! Why a baseline run failed.

/// Why a baseline run failed.
#[derive(Debug, thiserror::Error)]
pub enum CeilingError {
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
