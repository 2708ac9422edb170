//! Why an event is refused before any claim.

use proto::v1::{GrantOutcome, GrantResult};

use super::results::failed;

/// Why an event is refused before any claim: the error code and the message of its
/// `INVALID` result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `INVALID`, `EXPIRED` or a `PROOF_*` code.
    pub code: &'static str,
    /// For logs and operators.
    pub why: String,
}

impl Refusal {
    pub(super) fn invalid(why: String) -> Self {
        Self {
            code: "INVALID",
            why,
        }
    }

    pub(super) fn result(self, trade_no: &str) -> GrantResult {
        failed(trade_no, GrantOutcome::Invalid, self.code, self.why)
    }
}

/// Error codes of events refused before any claim for their proof, their expiry or
/// their undeclared reward type: the label values of
/// `reward_service_events_refused_total{code}` (registered at 0 at start).
pub use reward_runtime::catalogue::REFUSAL_CODES;
