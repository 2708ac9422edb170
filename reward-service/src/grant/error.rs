//! What a grant fails with when the store itself, or the archive, failed.

use std::path::PathBuf;

use crate::claim::ClaimError;

/// Grant failures (the store itself, or the archive, failed).
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// The claim store failed.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// The failure archive could not be written (the grant is already marked failed).
    #[error("failure archive {path}: {source}")]
    Archive {
        /// The archive file.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
}
