//! The granter itself: the claim store, the downstream of each reward type, and where
//! permanent failures go; its settings and the lookups of a type's downstream.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::topic::FailureTopic;
use crate::claim::{Claims, Grant};
use crate::downstream::{Contract, CreditError, Downstream, ErrorCode};
use crate::tokens::Tokens;

/// A reward type with no downstream: a permanent failure (module doc).
pub(super) fn no_downstream(reward_type: &str) -> CreditError {
    CreditError::not_credited(
        ErrorCode::Invalid,
        format!("no downstream for reward type {reward_type:?}"),
    )
}

/// The contract assumed where no downstream is configured (its grants fail for good
/// before any call).
const NO_CONTRACT: Contract = Contract {
    honours_key: false,
    status: false,
    max_call_ms: 0,
};

/// Grants rewards through the claim store and the configured downstreams.
#[derive(Debug, Clone)]
pub struct Granter {
    pub(super) claims: Claims,
    pub(super) downstreams: Arc<HashMap<String, Arc<dyn Downstream>>>,
    pub(super) archive: PathBuf,
    pub(super) tokens: Option<Tokens>,
    pub(super) failures: Option<FailureTopic>,
    pub(super) max_amounts: Arc<HashMap<String, i64>>,
}

impl Granter {
    /// `downstreams` maps reward types to the system that credits them; permanent
    /// failures are appended to `archive` (JSON lines).
    pub fn new(
        claims: Claims,
        downstreams: HashMap<String, Arc<dyn Downstream>>,
        archive: PathBuf,
    ) -> Self {
        Self {
            claims,
            downstreams: Arc::new(downstreams),
            archive,
            tokens: None,
            failures: None,
            max_amounts: Arc::new(HashMap::new()),
        }
    }

    /// The largest amount one grant of a type may carry (types not named: up to
    /// [`crate::claim::MAX_AMOUNT`]).
    pub fn with_max_amounts(mut self, max: HashMap<String, i64>) -> Self {
        self.max_amounts = Arc::new(max);
        self
    }

    /// Whether a downstream is configured for `reward_type`.
    pub fn knows_type(&self, reward_type: &str) -> bool {
        self.downstreams.contains_key(reward_type)
    }

    /// Refuses a grant over its type's ceiling (a credential that can call `Grant`
    /// still cannot credit more than that).
    pub fn check_ceiling(&self, g: &Grant) -> Result<(), String> {
        match self.max_amounts.get(&g.reward_type) {
            Some(max) if g.amount > *max => Err(format!(
                "amount {} is over the maximum {max} for reward type {}",
                g.amount, g.reward_type
            )),
            _ => Ok(()),
        }
    }

    /// Moves each credited reward's token out of the user's pending hash.
    pub fn with_tokens(mut self, tokens: Tokens) -> Self {
        self.tokens = Some(tokens);
        self
    }

    /// Sends each permanent failure to the failure topic as well as the archive.
    pub fn with_failure_topic(mut self, topic: FailureTopic) -> Self {
        self.failures = Some(topic);
        self
    }

    /// The claim store.
    pub fn claims(&self) -> &Claims {
        &self.claims
    }

    /// The downstream of a reward type, if one is configured.
    pub(super) fn downstream(&self, reward_type: &str) -> Option<&Arc<dyn Downstream>> {
        self.downstreams.get(reward_type)
    }

    pub(super) fn contract(&self, reward_type: &str) -> Contract {
        self.downstream(reward_type)
            .map_or(NO_CONTRACT, |d| d.contract())
    }
}
