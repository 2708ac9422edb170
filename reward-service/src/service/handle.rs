//! The service itself ([`Service`]): its granter, token store, SDK and limits.

use std::sync::Arc;

use sdk::Sdk;

use super::error::ServiceError;
use super::proofs::EventsConfig;
use crate::grant::Granter;
use crate::tokens::Tokens;

/// The service: cheap to clone.
#[derive(Debug, Clone)]
pub struct Service {
    pub(super) granter: Granter,
    pub(super) tokens: Tokens,
    pub(super) sdk: Sdk,
    pub(super) inner: Arc<Limits>,
}

/// What a service is configured with beyond its parts.
#[derive(Debug)]
pub(super) struct Limits {
    /// Most events per batch.
    pub(super) max_batch: usize,
    /// What unproven events get.
    pub(super) events: EventsConfig,
}

impl Service {
    /// A service over a granter (which should carry `tokens`), the token store and the
    /// SDK (codec and virtual queue); unproven events are refused.
    pub fn new(granter: Granter, tokens: Tokens, sdk: Sdk, max_batch: usize) -> Self {
        Self {
            granter,
            tokens,
            sdk,
            inner: Arc::new(Limits {
                max_batch,
                events: EventsConfig::default(),
            }),
        }
    }

    /// This service with `[events]` settings (what it does with unproven events).
    pub fn with_events(self, events: EventsConfig) -> Self {
        let max_batch = self.inner.max_batch;
        Self {
            inner: Arc::new(Limits { max_batch, events }),
            ..self
        }
    }

    /// The SDK in use.
    pub fn sdk(&self) -> &Sdk {
        &self.sdk
    }

    /// The token store's service side (moves, reads).
    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    /// The granter in use.
    pub fn granter(&self) -> &Granter {
        &self.granter
    }

    /// Most events per batch.
    pub fn max_batch(&self) -> usize {
        self.inner.max_batch
    }

    /// Whether Redis answers (readiness).
    pub async fn ready(&self) -> Result<(), ServiceError> {
        self.granter.claims().ping().await?;
        Ok(())
    }
}
