//! Why a downstream did not credit: its code ([`ErrorCode`], which decides retry) and
//! whether the credit may have happened anyway ([`CreditError::in_doubt`]).

/// Why a downstream did not credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// No answer in time (the credit may or may not have happened).
    Timeout,
    /// Over the downstream's capacity.
    RateLimited,
    /// The downstream failed (5xx, connection refused or reset).
    Unavailable,
    /// Another request with the same idempotency key is in flight (`409`).
    KeyInUse,
    /// The request itself is wrong (4xx validation).
    Invalid,
    /// The account cannot take credits.
    AccountClosed,
}

impl ErrorCode {
    /// The stable name of the code, as the APIs and the failure records carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::RateLimited => "RATE_LIMITED",
            ErrorCode::Unavailable => "UNAVAILABLE",
            ErrorCode::KeyInUse => "KEY_IN_USE",
            ErrorCode::Invalid => "INVALID",
            ErrorCode::AccountClosed => "ACCOUNT_CLOSED",
        }
    }

    /// Whether the same credit may succeed if sent again later.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::Timeout
                | ErrorCode::RateLimited
                | ErrorCode::Unavailable
                | ErrorCode::KeyInUse
        )
    }

    /// Whether an error of this code leaves the credit's outcome unknown unless the
    /// downstream said otherwise: no answer, a failed server, a key still in use.
    fn doubtful(self) -> bool {
        matches!(
            self,
            ErrorCode::Timeout | ErrorCode::Unavailable | ErrorCode::KeyInUse
        )
    }
}

/// A downstream's refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("downstream {code:?}: {detail}")]
pub struct CreditError {
    /// What kind of failure (decides retry).
    pub code: ErrorCode,
    /// For logs and the failure archive (never a credential: URLs are redacted).
    pub detail: String,
    /// True when the credit may have happened anyway (see the module doc): the grant
    /// is then resolved, never treated as not credited.
    pub in_doubt: bool,
}

impl CreditError {
    /// An error of `code`, in doubt exactly when the code leaves the outcome unknown
    /// (timeout, unavailable, key in use).
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            in_doubt: code.doubtful(),
        }
    }

    /// An error of `code` that is known to have credited nothing: the request never
    /// left (connection refused), or the downstream said so.
    pub fn not_credited(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            in_doubt: false,
        }
    }
}
