//! The service's configuration: one TOML file (`--config`), overridable per key by
//! `REWARD_SERVICE__SECTION__KEY=value` environment variables, validated at start-up.
//!
//! ```toml
//! [server]
//! grpc_addr = "127.0.0.1:50051"
//! http_addr = "127.0.0.1:8081"
//! max_body_bytes = 262144        # larger HTTP bodies get 413
//! max_tokens_per_request = 200   # more tokens in one wallet call get 400
//! max_batch = 1000               # more events in one GrantBatch get INVALID_ARGUMENT
//! shutdown_grace_ms = 10000      # in-flight calls get this long on SIGTERM / Ctrl-C
//!
//! [claims]                       # see crate::claim
//! shards = 16
//! lease_ms = 30000
//! retention_secs = 2592000
//!
//! [budgets]                      # "activity/scene" = total, set at first use only
//! "cny2027/rain" = 100000000
//!
//! [downstreams.cash]             # per reward type
//! kind = "ledger"
//! capacity = 300000              # credits/s before it answers RATE_LIMITED (optional)
//! max_amount = 100000            # larger grants of this type are INVALID (optional)
//! honours_idempotency_key = true # the ledger credits a repeated key once (default false)
//! [downstreams.coupon]
//! kind = "http"
//! url = "http://127.0.0.1:9000/credit"
//! timeout_ms = 2000
//! honours_idempotency_key = true # what the downstream promises (default false)
//! status_url = "http://127.0.0.1:9000/status"   # answers whether a trade was credited
//!
//! [failures]
//! archive = "/var/tmp/reward-service/failures.jsonl"
//! queue = "failures"             # the SDK virtual queue of the failure topic
//!
//! [events]                       # see EventsConfig: events without a proof
//! unproven = "refuse"            # or "accept" with accept_unproven_until (a rollout)
//!
//! [wallet]                       # see WalletConfig: per-user sessions, CORS
//! session_keys_file = "/etc/reward/session-keys"   # else REWARD_SESSION_KEYS[_FILE]
//! cors_origins = ["https://wallet.example.com"]
//!
//! [sdk]                          # the SDK's own config (token store, queues); the
//! # ...                          # service uses its Redis, keys and virtual queue
//! ```
//!
//! # Two bearer credentials, one per API
//! - **The grant credential** (`REWARD_SERVICE_TOKEN`, or a file named by
//!   `REWARD_SERVICE_TOKEN_FILE`) opens gRPC (`Grant`, `GrantAsync`, `GrantBatch`: any
//!   amount up to the type's `max_amount`, for any user) and `/metrics`. Consumers and
//!   back-office systems hold it.
//! - **The wallet credential** (`REWARD_WALLET_TOKEN` / `REWARD_WALLET_TOKEN_FILE`)
//!   opens the wallet HTTP routes only: they credit nothing but stored, authentic,
//!   unexpired tokens of the user named. Wallet frontends hold it. A stolen wallet
//!   credential cannot call `Grant`.
//!
//! - **The metrics credential** (`REWARD_METRICS_TOKEN[_FILE]`, optional) opens
//!   `/metrics` only, so the scraper never holds a credential that can grant. Without
//!   it, `/metrics` takes the grant credential.
//! - **The admin credential** (`REWARD_ADMIN_TOKEN[_FILE]`, optional) opens the
//!   `BudgetAdmin` gRPC API only (read and set any scene's budget; `reward-ctl budget
//!   --service`). Without it that API refuses every call. It cannot grant, and the
//!   grant credential cannot set a budget.
//!
//! All come from the environment, never from the config file (which lives in the
//! repository); a file's trailing newline is ignored. Each must be at least 16 bytes,
//! and they must differ; the service refuses to start otherwise. They are never
//! logged; the config's `Debug` prints their lengths only.
//!
//! # Settings that guard money
//! - `claims.lease_ms` must outlast two of every downstream's longest calls plus a
//!   margin (2 x `timeout_ms` + 1 s for HTTP, 2 x 5 s + 1 s for the ledger): an owner
//!   that resolves an earlier attempt asks the status, then credits, and no takeover
//!   may start while either can still land.
//! - `sdk.token.ttl_secs` may not exceed `claims.retention_secs`: a token must expire
//!   before the record that refuses its second credit does.
//! - `[budgets]` are initial values: a start-up sets a scene's budget only when it has
//!   none, so a restart never overwrites a live change (`reward-ctl budget`).
//! - What a downstream promises for in-doubt credits (`honours_idempotency_key`,
//!   `status_url`) is declared per downstream; the default is the weakest promise
//!   (one attempt, in-doubt grants held for an operator). See
//!   `reward_service::downstream`.
//!
//! # Budgets are scoped per activity and scene
//! Two activities may both have a scene called `rain`; the budget scope is
//! `activity_id/scene_id`, so they never share money.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use reward_runtime::credential::Credential;
use serde::Deserialize;

use crate::claim::ClaimConfig;
pub use crate::service::{EventsConfig, MAX_ACCEPT_WINDOW_MS};

mod sections;

use self::sections::{
    check_budgets, check_lease, claim_config, credentials, downstreams_of, server_config,
    wallet_config,
};

/// Configuration failures, each naming what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read, is not TOML, has the wrong shape, or an override
    /// does not fit it.
    #[error("config: {0}")]
    Document(#[from] reward_runtime::env::DocumentError),
    /// A value is out of range or inconsistent.
    #[error("config: {0}")]
    Invalid(String),
    /// The bearer credential is missing or too short.
    #[error("bearer credential: {0}")]
    Credential(String),
    /// The embedded SDK section is invalid.
    #[error("config [sdk]: {0}")]
    Sdk(#[from] sdk::config::ConfigError),
}

/// Listener and request limits.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// gRPC listen address.
    pub grpc_addr: SocketAddr,
    /// HTTP (wallet) listen address.
    pub http_addr: SocketAddr,
    /// Largest HTTP body accepted (413 above).
    pub max_body_bytes: usize,
    /// Most tokens in one wallet call (400 above).
    pub max_tokens_per_request: usize,
    /// Most events in one `GrantBatch`.
    pub max_batch: usize,
    /// How long in-flight calls may run after a shutdown signal.
    pub shutdown_grace_ms: u64,
}

/// One downstream as configured. Its `Debug` shows URLs without their user name or
/// password.
#[derive(Clone, PartialEq, Eq)]
pub enum DownstreamConfig {
    /// The built-in Redis ledger, optionally capped at `capacity` credits/s.
    Ledger {
        /// Credits per second before `RATE_LIMITED`.
        capacity: Option<NonZeroU32>,
        /// Whether it honours the idempotency key.
        honours_key: bool,
    },
    /// An HTTP endpoint.
    Http {
        /// Where credits are POSTed (may hold a password: never printed).
        url: String,
        /// Per-call timeout.
        timeout_ms: u64,
        /// Whether it honours the idempotency key.
        honours_key: bool,
        /// Where to ask whether a trade number was credited.
        status_url: Option<String>,
    },
}

impl DownstreamConfig {
    /// The HTTP downstream this entry describes (`Http` entries only).
    pub fn http(&self) -> Result<crate::downstream::Http, String> {
        match self {
            DownstreamConfig::Http {
                url,
                timeout_ms,
                honours_key,
                status_url,
            } => crate::downstream::Http::with_options(
                url,
                &crate::downstream::HttpOptions {
                    timeout: std::time::Duration::from_millis(*timeout_ms),
                    honours_key: *honours_key,
                    status_url: status_url.clone(),
                },
            ),
            DownstreamConfig::Ledger { .. } => Err("a ledger is not an HTTP downstream".into()),
        }
    }
}

impl std::fmt::Debug for DownstreamConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |u: &str| {
            reqwest::Url::parse(u).map_or_else(
                |_| "(unparsable url)".to_string(),
                |u| crate::downstream::redacted(&u),
            )
        };
        match self {
            DownstreamConfig::Ledger {
                capacity,
                honours_key,
            } => f
                .debug_struct("Ledger")
                .field("capacity", capacity)
                .field("honours_key", honours_key)
                .finish(),
            DownstreamConfig::Http {
                url,
                timeout_ms,
                honours_key,
                status_url,
            } => f
                .debug_struct("Http")
                .field("url", &shown(url))
                .field("timeout_ms", timeout_ms)
                .field("honours_key", honours_key)
                .field("status_url", &status_url.as_deref().map(shown))
                .finish(),
        }
    }
}

impl DownstreamConfig {
    /// The longest one call to it can take (ms).
    pub fn max_call_ms(&self) -> u64 {
        match self {
            DownstreamConfig::Ledger { .. } => {
                u64::try_from(crate::downstream::LEDGER_TIMEOUT.as_millis()).unwrap_or(u64::MAX)
            }
            DownstreamConfig::Http { timeout_ms, .. } => *timeout_ms,
        }
    }
}

/// The whole service configuration.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Listeners and limits.
    pub server: ServerConfig,
    /// Redis of the claim store and the ledger (default: the SDK store's).
    pub redis_url: String,
    /// Claim store settings.
    pub claims: ClaimConfig,
    /// Budgets to set at start-up: scope (`activity/scene`) → total.
    pub budgets: BTreeMap<String, i64>,
    /// Reward type → downstream.
    pub downstreams: HashMap<String, DownstreamConfig>,
    /// Reward type → the largest amount one grant may carry.
    pub max_amounts: HashMap<String, i64>,
    /// Key prefix of the built-in ledger.
    pub ledger_prefix: String,
    /// Redis of the built-in ledger (`[ledger] redis_url`; default: `redis_url`). A
    /// stand-in wallet on its own Redis keeps its credits out of the pipeline's Redis
    /// work, as a real wallet's would be.
    pub ledger_redis_url: String,
    /// The failure archive (JSON lines).
    pub archive: PathBuf,
    /// The SDK virtual queue of the failure topic.
    pub failure_queue: String,
    /// The SDK (token store, keys, virtual queue).
    pub sdk: sdk::config::SdkConfig,
    /// The grant credential (gRPC and `/metrics`).
    pub credential: Credential,
    /// The wallet credential (the wallet HTTP routes).
    pub wallet_credential: Credential,
    /// The metrics credential (`/metrics`), when one is set.
    pub metrics_credential: Option<Credential>,
    /// The admin credential (the `BudgetAdmin` gRPC API), when one is set.
    pub admin_credential: Option<Credential>,
    /// Where budget changes are recorded: the change trail `{trail_key}:audit`, the
    /// one `reward-ctl changes` reads (`[admin] trail_key`, default `reward:config`).
    pub trail_key: String,
    /// Compensation from the token store (`[sweeper]`, [`crate::sweeper`]).
    pub sweeper: crate::sweeper::SweepConfig,
    /// Wallet sessions and the page's neighbours (`[wallet]`).
    pub wallet: WalletConfig,
    /// What happens to events that do not prove themselves (`[events]`).
    pub events: EventsConfig,
}

/// The `[wallet]` section: per-user sessions and the origins allowed to call the
/// wallet routes from a browser.
///
/// ```toml
/// [wallet]
/// session_keys_file = "/etc/reward/session-keys"   # else REWARD_SESSION_KEYS[_FILE]
/// cors_origins = ["https://wallet.example.com"]
/// ```
///
/// Sessions are on when a session key ring is found (the file named here, else the
/// `REWARD_SESSION_KEYS` / `REWARD_SESSION_KEYS_FILE` variables, see
/// [`sdk::session`]); without one, a session is refused with `session_invalid` and only
/// the wallet credential opens the routes. An origin is `scheme://host[:port]`, exact;
/// `*` is refused (a page on any site could then read a user's wallet with a stolen
/// session).
#[derive(Debug, Clone, Default)]
pub struct WalletConfig {
    /// The session verifier, when sessions are on.
    pub sessions: Option<sdk::session::SessionCodec>,
    /// Origins answered with CORS headers.
    pub cors_origins: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawServer {
    grpc_addr: Option<String>,
    http_addr: Option<String>,
    max_body_bytes: Option<usize>,
    max_tokens_per_request: Option<usize>,
    max_batch: Option<usize>,
    shutdown_grace_ms: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawClaims {
    key_prefix: Option<String>,
    shards: Option<u32>,
    lease_ms: Option<u64>,
    retention_secs: Option<u64>,
    pool_size: Option<usize>,
    replica_acks: Option<u32>,
    replica_wait_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDownstream {
    kind: String,
    capacity: Option<u32>,
    url: Option<String>,
    timeout_ms: Option<u64>,
    max_amount: Option<i64>,
    #[serde(default)]
    honours_idempotency_key: bool,
    status_url: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFailures {
    archive: Option<PathBuf>,
    queue: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawWallet {
    session_keys_file: Option<PathBuf>,
    #[serde(default)]
    cors_origins: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawEvents {
    unproven: Option<String>,
    accept_unproven_until: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    trail_key: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLedger {
    key_prefix: Option<String>,
    redis_url: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    server: RawServer,
    redis_url: Option<String>,
    #[serde(default)]
    claims: RawClaims,
    #[serde(default)]
    budgets: BTreeMap<String, i64>,
    #[serde(default)]
    downstreams: BTreeMap<String, RawDownstream>,
    #[serde(default)]
    ledger: RawLedger,
    #[serde(default)]
    failures: RawFailures,
    #[serde(default)]
    sweeper: crate::sweeper::SweepConfig,
    #[serde(default)]
    wallet: RawWallet,
    #[serde(default)]
    events: RawEvents,
    #[serde(default)]
    admin: RawAdmin,
    sdk: toml::Table,
}

/// The `[events]` section, checked against the clock at start-up (`now_ms`).
fn events_config(raw: RawEvents, now_ms: i64) -> Result<EventsConfig, ConfigError> {
    let until = raw.accept_unproven_until.as_deref();
    match (raw.unproven.as_deref().unwrap_or("refuse"), until) {
        ("refuse", None) => Ok(EventsConfig::default()),
        ("refuse", Some(_)) => Err(ConfigError::Invalid(
            "events.accept_unproven_until is set, but events.unproven is \"refuse\"".into(),
        )),
        ("accept", None) => Err(ConfigError::Invalid(
            "events.unproven = \"accept\" needs events.accept_unproven_until (a UTC time such \
             as \"2027-01-20T00:00:00Z\"): unproven events are accepted only for a stated window"
                .into(),
        )),
        ("accept", Some(text)) => {
            let until = reward_runtime::clock::parse_utc(text).ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "events.accept_unproven_until {text:?} is not a UTC time YYYY-MM-DDTHH:MM:SSZ"
                ))
            })?;
            if until > now_ms.saturating_add(MAX_ACCEPT_WINDOW_MS) {
                return Err(ConfigError::Invalid(format!(
                    "events.accept_unproven_until {text} is more than 30 days ahead: the window \
                     for unproven events is a rollout's, not a setting"
                )));
            }
            Ok(EventsConfig {
                accept_unproven_until_ms: Some(until),
            })
        }
        (other, _) => Err(ConfigError::Invalid(format!(
            "events.unproven is {other:?}; expected \"refuse\" or \"accept\""
        ))),
    }
}

/// The environment prefix of overrides.
pub const ENV_PREFIX: &str = "REWARD_SERVICE__";

impl ServiceConfig {
    /// Reads `path`, applies `REWARD_SERVICE__*` (and, to the `[sdk]` section,
    /// `REWARD_SDK__*`) overrides and the credential from the environment, validates.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        reward_runtime::env::load(path, Self::from_toml_str)
    }

    /// Parses a document with the given environment (overrides and credential).
    pub fn from_toml_str(text: &str, env: &[(String, String)]) -> Result<Self, ConfigError> {
        let raw: Raw = reward_runtime::env::service_raw(text, env, ENV_PREFIX)?;
        let sdk = sdk::config::SdkConfig::from_table(&raw.sdk)?;
        let server = server_config(raw.server)?;
        let claims = claim_config(raw.claims)?;
        check_budgets(&raw.budgets)?;
        let (downstreams, max_amounts) = downstreams_of(raw.downstreams)?;
        check_lease(&claims, &downstreams)?;
        if sdk.token.ttl_secs > claims.retention_secs {
            return Err(ConfigError::Invalid(format!(
                "sdk.token.ttl_secs {} is longer than claims.retention_secs {}: a token could outlive the record that refuses its second credit",
                sdk.token.ttl_secs, claims.retention_secs
            )));
        }
        let failure_queue = raw.failures.queue.unwrap_or_else(|| "failures".into());
        if !sdk.routing.queues.contains_key(&failure_queue) {
            return Err(ConfigError::Invalid(format!(
                "failures.queue {failure_queue:?} is not a queue of [sdk.queues]"
            )));
        }
        raw.sweeper.check().map_err(ConfigError::Invalid)?;
        if raw.sweeper.unstored_after_ms <= sdk.store.retry_for_ms {
            return Err(ConfigError::Invalid(format!(
                "sweeper.unstored_after_ms {} must be longer than sdk.store.retry_for_ms {}: a write the SDK still retries would be counted as never stored",
                raw.sweeper.unstored_after_ms, sdk.store.retry_for_ms
            )));
        }
        let creds = credentials(env)?;
        let wallet = wallet_config(raw.wallet, env)?;
        let events = events_config(raw.events, reward_runtime::clock::now_ms())?;
        Ok(Self {
            events,
            wallet,
            sweeper: raw.sweeper,
            server,
            ledger_redis_url: raw
                .ledger
                .redis_url
                .clone()
                .or_else(|| raw.redis_url.clone())
                .unwrap_or_else(|| sdk.store.redis_url.clone()),
            redis_url: raw.redis_url.unwrap_or_else(|| sdk.store.redis_url.clone()),
            claims,
            budgets: raw.budgets,
            downstreams,
            max_amounts,
            ledger_prefix: raw.ledger.key_prefix.unwrap_or_else(|| "ledger".into()),
            archive: raw
                .failures
                .archive
                .unwrap_or_else(|| PathBuf::from("/var/tmp/reward-service/failures.jsonl")),
            failure_queue,
            sdk,
            credential: creds.grant,
            wallet_credential: creds.wallet,
            metrics_credential: creds.metrics,
            admin_credential: creds.admin,
            trail_key: raw
                .admin
                .trail_key
                .unwrap_or_else(|| "reward:config".into()),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
