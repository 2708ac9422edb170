//! Why a control command failed.

/// Why a command failed: refused (bad input, exit 2) or broken (Redis, files, exit 1).
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The change was refused; nothing was written.
    #[error("refused: {0}")]
    Refused(String),
    /// Something failed underneath.
    #[error("{0}")]
    Failed(String),
}

pub(super) fn failed(e: impl std::fmt::Display) -> ControlError {
    ControlError::Failed(e.to_string())
}
