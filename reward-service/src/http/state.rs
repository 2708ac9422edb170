//! What the wallet routes share.

use reward_runtime::credential::Credential;
use sdk::session::SessionCodec;

use crate::service::Service;

/// What the routes share.
#[derive(Debug, Clone)]
pub struct HttpState {
    /// The service.
    pub service: Service,
    /// The wallet credential (the wallet routes).
    pub credential: Credential,
    /// The credential of `/metrics` (the metrics credential, else the grant one).
    pub metrics_credential: Credential,
    /// Most tokens per request.
    pub max_tokens: usize,
    /// Largest request body (bytes); larger get 413.
    pub max_body_bytes: usize,
    /// The session verifier (and minter), when sessions are on.
    pub sessions: Option<SessionCodec>,
    /// Origins answered with CORS headers.
    pub cors_origins: Vec<String>,
    /// The configured budgets' scenes, whose gauges each `/metrics` scrape refreshes.
    pub budget_scenes: Vec<String>,
}
