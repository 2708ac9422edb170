//! What a downstream promises about in-doubt credits (module doc of [`super`]).

/// How a downstream lets an in-doubt credit be resolved (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contract {
    /// A repeated credit with the same idempotency key credits once.
    pub honours_key: bool,
    /// [`Downstream::status`] answers.
    pub status: bool,
    /// The longest one credit or status call can take, retries included (ms).
    pub max_call_ms: u64,
}

impl Contract {
    /// Whether an in-doubt credit can be resolved without an operator.
    pub fn resolvable(&self) -> bool {
        self.honours_key || self.status
    }
}
