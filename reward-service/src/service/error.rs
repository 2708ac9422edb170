//! The service's failures that the APIs turn into errors.

use crate::claim::ClaimError;

/// Service failures the APIs turn into errors (not per-grant outcomes).
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Redis failed while reading tokens or records.
    #[error("store unavailable: {0}")]
    Store(String),
    /// The request is malformed.
    #[error("{0}")]
    Invalid(String),
}

impl From<fred::error::Error> for ServiceError {
    fn from(e: fred::error::Error) -> Self {
        ServiceError::Store(e.to_string())
    }
}

impl From<ClaimError> for ServiceError {
    fn from(e: ClaimError) -> Self {
        match e {
            ClaimError::Invalid(why) => ServiceError::Invalid(why.into()),
            other => ServiceError::Store(other.to_string()),
        }
    }
}
