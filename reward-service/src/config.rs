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

/// Configuration failures, each naming what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read, is not TOML, or an override does not fit it.
    #[error("config: {0}")]
    Document(#[from] reward_runtime::env::DocumentError),
    /// The TOML does not parse or has the wrong shape.
    #[error("config: {0}")]
    Parse(String),
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
struct RawLedger {
    key_prefix: Option<String>,
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
    sdk: toml::Table,
}

/// The environment prefix of overrides.
pub const ENV_PREFIX: &str = "REWARD_SERVICE__";

fn addr(what: &str, v: Option<String>, default: &str) -> Result<SocketAddr, ConfigError> {
    let text = v.unwrap_or_else(|| default.to_string());
    text.parse()
        .map_err(|e| ConfigError::Invalid(format!("server.{what} {text:?}: {e}")))
}

fn positive<T: PartialOrd + Default + std::fmt::Display>(
    what: &str,
    v: Option<T>,
    default: T,
) -> Result<T, ConfigError> {
    let v = v.unwrap_or(default);
    if v <= T::default() {
        return Err(ConfigError::Invalid(format!(
            "{what} must be positive, not {v}"
        )));
    }
    Ok(v)
}

impl ServiceConfig {
    /// Reads `path`, applies `REWARD_SERVICE__*` (and, to the `[sdk]` section,
    /// `REWARD_SDK__*`) overrides and the credential from the environment, validates.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let (text, env) = reward_runtime::env::read_file(path)?;
        Self::from_toml_str(&text, &env)
    }

    /// Parses a document with the given environment (overrides and credential).
    pub fn from_toml_str(text: &str, env: &[(String, String)]) -> Result<Self, ConfigError> {
        let doc = reward_runtime::env::service_document(text, env, ENV_PREFIX)?;
        let raw: Raw = toml::Value::Table(doc)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse(e.to_string()))?;
        let sdk = sdk::config::SdkConfig::from_table(&raw.sdk)?;
        let s = raw.server;
        let server = ServerConfig {
            grpc_addr: addr("grpc_addr", s.grpc_addr, "127.0.0.1:50051")?,
            http_addr: addr("http_addr", s.http_addr, "127.0.0.1:8081")?,
            max_body_bytes: positive("server.max_body_bytes", s.max_body_bytes, 256 * 1024)?,
            max_tokens_per_request: positive(
                "server.max_tokens_per_request",
                s.max_tokens_per_request,
                200,
            )?,
            max_batch: positive("server.max_batch", s.max_batch, 1000)?,
            shutdown_grace_ms: positive("server.shutdown_grace_ms", s.shutdown_grace_ms, 10_000)?,
        };
        let d = ClaimConfig::default();
        let c = raw.claims;
        let claims = ClaimConfig {
            key_prefix: c.key_prefix.unwrap_or(d.key_prefix),
            shards: positive("claims.shards", c.shards, d.shards)?,
            lease_ms: positive("claims.lease_ms", c.lease_ms, d.lease_ms)?,
            retention_secs: positive("claims.retention_secs", c.retention_secs, d.retention_secs)?,
            pool_size: positive("claims.pool_size", c.pool_size, d.pool_size)?,
        };
        if claims.key_prefix.is_empty() || claims.key_prefix.contains(['{', '}']) {
            return Err(ConfigError::Invalid(
                "claims.key_prefix must be set, without braces".into(),
            ));
        }
        if claims.retention_secs * 1000 <= claims.lease_ms {
            return Err(ConfigError::Invalid(
                "claims.retention_secs must outlast claims.lease_ms".into(),
            ));
        }
        for (scope, total) in &raw.budgets {
            if *total < 0 {
                return Err(ConfigError::Invalid(format!(
                    "budgets.{scope:?} is negative ({total})"
                )));
            }
            let ok = scope
                .split_once('/')
                .is_some_and(|(a, s)| !a.is_empty() && !s.is_empty());
            if !ok {
                return Err(ConfigError::Invalid(format!(
                    "budgets: {scope:?} is not \"activity/scene\""
                )));
            }
        }
        let mut downstreams = HashMap::new();
        let mut max_amounts = HashMap::new();
        for (ty, d) in raw.downstreams {
            if let Some(m) = d.max_amount {
                if !(1..=crate::claim::MAX_AMOUNT).contains(&m) {
                    return Err(ConfigError::Invalid(format!(
                        "downstreams.{ty}.max_amount must be in 1..=2^53-1, not {m}"
                    )));
                }
                max_amounts.insert(ty.clone(), m);
            }
            let parsed = match d.kind.as_str() {
                "ledger" => {
                    if d.url.is_some() || d.timeout_ms.is_some() || d.status_url.is_some() {
                        return Err(ConfigError::Invalid(format!(
                            "downstreams.{ty}: a ledger takes no url, status_url or timeout_ms"
                        )));
                    }
                    let capacity = match d.capacity {
                        None => None,
                        Some(n) => Some(NonZeroU32::new(n).ok_or_else(|| {
                            ConfigError::Invalid(format!(
                                "downstreams.{ty}.capacity must be positive"
                            ))
                        })?),
                    };
                    DownstreamConfig::Ledger {
                        capacity,
                        honours_key: d.honours_idempotency_key,
                    }
                }
                "http" => {
                    let url = d.url.ok_or_else(|| {
                        ConfigError::Invalid(format!("downstreams.{ty}: kind http needs url"))
                    })?;
                    if d.capacity.is_some() {
                        return Err(ConfigError::Invalid(format!(
                            "downstreams.{ty}: capacity is a ledger setting"
                        )));
                    }
                    let timeout_ms =
                        positive(&format!("downstreams.{ty}.timeout_ms"), d.timeout_ms, 2_000)?;
                    let parsed = DownstreamConfig::Http {
                        url,
                        timeout_ms,
                        honours_key: d.honours_idempotency_key,
                        status_url: d.status_url,
                    };
                    crate::downstream::Http::with_options_of(&parsed)
                        .map_err(|e| ConfigError::Invalid(format!("downstreams.{ty}: {e}")))?;
                    parsed
                }
                other => {
                    return Err(ConfigError::Invalid(format!(
                        "downstreams.{ty}.kind {other:?}: expected \"ledger\" or \"http\""
                    )));
                }
            };
            downstreams.insert(ty, parsed);
        }
        if let Some((ty, d)) = downstreams.iter().max_by_key(|(_, d)| d.max_call_ms()) {
            // A takeover may ask the status and then credit: two calls in one lease.
            let need = 2 * d.max_call_ms() + crate::grant::SETTLE_MARGIN_MS;
            if claims.lease_ms < need {
                return Err(ConfigError::Invalid(format!(
                    "claims.lease_ms {} is shorter than downstream {ty}'s longest call plus margin ({need} ms): a takeover could credit while that call still lands",
                    claims.lease_ms
                )));
            }
        }
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
        let credential = credential_named(env, "REWARD_SERVICE_TOKEN")?;
        let wallet_credential = credential_named(env, "REWARD_WALLET_TOKEN")?;
        let metrics_credential = if Credential::is_set(env, "REWARD_METRICS_TOKEN") {
            Some(credential_named(env, "REWARD_METRICS_TOKEN")?)
        } else {
            None
        };
        if let Some(m) = &metrics_credential
            && (credential.same_as(m) || wallet_credential.same_as(m))
        {
            return Err(ConfigError::Credential(
                "REWARD_METRICS_TOKEN must differ from the grant and wallet credentials".into(),
            ));
        }
        if credential.same_as(&wallet_credential) {
            return Err(ConfigError::Credential(
                "REWARD_WALLET_TOKEN must differ from REWARD_SERVICE_TOKEN: a wallet credential must not open Grant".into(),
            ));
        }
        Ok(Self {
            server,
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
            credential,
            wallet_credential,
            metrics_credential,
        })
    }
}

/// The credential in `var`, or in the file `{var}_FILE` names.
fn credential_named(env: &[(String, String)], var: &str) -> Result<Credential, ConfigError> {
    Credential::from_env(env, var).map_err(|e| ConfigError::Credential(e.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const DOC: &str = r#"
        [budgets]
        "cny/rain" = 1000
        [downstreams.cash]
        kind = "ledger"
        capacity = 2000
        [downstreams.coupon]
        kind = "http"
        url = "http://127.0.0.1:9000/credit"
        [sdk]
        default_queue = "massive"
        [sdk.producers.k]
        kind = "kafka"
        brokers = "127.0.0.1:19092"
        [sdk.producers.r]
        kind = "rocketmq"
        namesrv = "127.0.0.1:9876"
        group = "g"
        [sdk.queues.massive]
        topic = "massive"
        primary = "k"
        backup = "r"
        [sdk.queues.failures]
        topic = "failures"
        primary = "k"
        backup = "r"
        [sdk.types.cash]
    "#;

    fn env(extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut v = vec![
            (
                "REWARD_SERVICE_TOKEN".to_string(),
                "a-long-enough-credential".to_string(),
            ),
            (
                "REWARD_WALLET_TOKEN".to_string(),
                "another-wallet-credential".to_string(),
            ),
        ];
        v.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        v
    }

    #[test]
    fn a_valid_document_with_overrides() {
        let c = ServiceConfig::from_toml_str(
            DOC,
            &env(&[
                ("REWARD_SERVICE__CLAIMS__SHARDS", "32"),
                ("REWARD_SERVICE__SERVER__HTTP_ADDR", "127.0.0.1:9999"),
            ]),
        )
        .unwrap();
        assert_eq!(c.claims.shards, 32);
        assert_eq!(c.server.http_addr.port(), 9999);
        assert_eq!(c.budgets["cny/rain"], 1000);
        assert_eq!(c.failure_queue, "failures");
        assert_eq!(
            c.downstreams["coupon"],
            DownstreamConfig::Http {
                url: "http://127.0.0.1:9000/credit".into(),
                timeout_ms: 2000,
                honours_key: false,
                status_url: None,
            }
        );
        assert!(c.credential.matches(b"a-long-enough-credential"));
        assert!(!c.credential.matches(b"a-long-enough-credentiaL"));
        assert!(!c.credential.matches(b"a-long-enough-credential-"));
        let printed = format!("{c:?}");
        assert!(!printed.contains("a-long-enough"), "{printed}");
    }

    #[test]
    fn bad_documents_are_refused_with_a_reason() {
        let cases: [(&str, &str); 12] = [
            // A takeover could start while the ledger's call (5 s) still lands.
            ("[claims]\nlease_ms = 2000\n", "shorter than downstream"),
            // Tokens (7 days by default) would outlive their records.
            ("[claims]\nretention_secs = 60\n", "sdk.token.ttl_secs"),
            (
                "[downstreams.gem]\nkind = \"ledger\"\nmax_amount = 0\n",
                "max_amount",
            ),
            (
                "[downstreams.gem]\nkind = \"ledger\"\nstatus_url = \"http://x/s\"\n",
                "takes no url",
            ),
            ("[claims]\nshards = 0\n", "claims.shards"),
            ("[budgets]\nrain = 5\n", "activity/scene"),
            ("[budgets]\n\"a/b\" = -5\n", "negative"),
            ("[downstreams.gem]\nkind = \"magic\"\n", "magic"),
            ("[downstreams.gem]\nkind = \"http\"\n", "needs url"),
            ("[failures]\nqueue = \"nope\"\n", "nope"),
            ("[server]\ngrpc_addr = \"here\"\n", "grpc_addr"),
            ("[server]\nunknown_knob = 1\n", "unknown"),
        ];
        for (extra, want) in cases {
            // Later tables of the same name would clash: put the extra first.
            let doc = format!(
                "{extra}\n{}",
                DOC.replace("[budgets]\n        \"cny/rain\" = 1000", "")
            );
            let e = ServiceConfig::from_toml_str(&doc, &env(&[])).unwrap_err();
            assert!(e.to_string().contains(want), "{extra}: {e}");
        }
    }

    #[test]
    fn the_shipped_local_stack_config_is_valid() {
        let text = include_str!("../../ops/reward-service.toml");
        let c = ServiceConfig::from_toml_str(text, &env(&[])).unwrap();
        assert_eq!(c.failure_queue, "failures");
        assert!(c.downstreams.contains_key("coupon"));
    }

    #[test]
    fn the_credential_is_required_and_long() {
        let e = ServiceConfig::from_toml_str(DOC, &[]).unwrap_err();
        assert!(matches!(e, ConfigError::Credential(_)), "{e}");
        let short = vec![("REWARD_SERVICE_TOKEN".to_string(), "short".to_string())];
        let e = ServiceConfig::from_toml_str(DOC, &short).unwrap_err();
        assert!(matches!(e, ConfigError::Credential(_)), "{e}");
        assert!(!e.to_string().contains("short"));
        let dir = std::env::temp_dir().join(format!("cred-{:08x}", rand::random::<u32>()));
        std::fs::write(&dir, "from-a-file-credential-123\n").unwrap();
        let wallet = (
            "REWARD_WALLET_TOKEN".to_string(),
            "the-wallet-credential-456".to_string(),
        );
        let file = vec![
            (
                "REWARD_SERVICE_TOKEN_FILE".to_string(),
                dir.display().to_string(),
            ),
            wallet.clone(),
        ];
        let c = ServiceConfig::from_toml_str(DOC, &file).unwrap();
        assert!(c.credential.matches(b"from-a-file-credential-123"));
        assert!(c.wallet_credential.matches(b"the-wallet-credential-456"));
        assert!(!c.credential.matches(b"the-wallet-credential-456"));
        let _ = std::fs::remove_file(dir);
        // The wallet credential is required, and may not be the grant credential.
        let no_wallet = vec![(
            "REWARD_SERVICE_TOKEN".to_string(),
            "the-wallet-credential-456".to_string(),
        )];
        let e = ServiceConfig::from_toml_str(DOC, &no_wallet).unwrap_err();
        assert!(e.to_string().contains("REWARD_WALLET_TOKEN"), "{e}");
        let metrics_as_wallet = vec![
            no_wallet[0].clone(),
            wallet.clone(),
            (
                "REWARD_METRICS_TOKEN".to_string(),
                "the-wallet-credential-456".to_string(),
            ),
        ];
        let e = ServiceConfig::from_toml_str(DOC, &metrics_as_wallet).unwrap_err();
        assert!(e.to_string().contains("REWARD_METRICS_TOKEN"), "{e}");
        let same = vec![no_wallet[0].clone(), wallet];
        let e = ServiceConfig::from_toml_str(DOC, &same).unwrap_err();
        assert!(e.to_string().contains("must differ"), "{e}");
        assert!(!e.to_string().contains("the-wallet-credential"), "{e}");
    }

    #[test]
    fn downstream_promises_and_ceilings_are_read_and_urls_never_echoed() {
        let doc = DOC
            .replace(
                "capacity = 2000",
                "capacity = 2000\nhonours_idempotency_key = true\nmax_amount = 500",
            )
            .replace(
                "url = \"http://127.0.0.1:9000/credit\"",
                "url = \"http://wallet:pw-secret@127.0.0.1:9000/credit\"\n\
                 status_url = \"http://127.0.0.1:9000/status\"\n\
                 honours_idempotency_key = true\ntimeout_ms = 1500",
            );
        let c = ServiceConfig::from_toml_str(&doc, &env(&[])).unwrap();
        assert_eq!(c.max_amounts.get("cash"), Some(&500));
        assert_eq!(
            c.downstreams["cash"],
            DownstreamConfig::Ledger {
                capacity: NonZeroU32::new(2000),
                honours_key: true
            }
        );
        assert_eq!(c.downstreams["coupon"].max_call_ms(), 1500);
        let shown = format!("{c:?}");
        assert!(!shown.contains("pw-secret"), "{shown}");
        let bad = doc.replace("http://127.0.0.1:9000/status", "ftp://u:pw-secret@h/s");
        let e = ServiceConfig::from_toml_str(&bad, &env(&[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("status_url") && !e.contains("pw-secret"), "{e}");
    }
}
