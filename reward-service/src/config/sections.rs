//! Reading each section of the configuration document into its settings: defaults,
//! ranges and cross-checks, and the bearer credentials from the environment.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::num::NonZeroU32;

use reward_runtime::credential::Credential;

use super::{
    ConfigError, DownstreamConfig, RawClaims, RawDownstream, RawServer, RawWallet, ServerConfig,
    WalletConfig,
};
use crate::claim::ClaimConfig;

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

/// The `[server]` section, with its defaults.
pub(super) fn server_config(s: RawServer) -> Result<ServerConfig, ConfigError> {
    Ok(ServerConfig {
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
    })
}

/// The `[claims]` section, with the claim store's defaults.
pub(super) fn claim_config(c: RawClaims) -> Result<ClaimConfig, ConfigError> {
    let d = ClaimConfig::default();
    let claims = ClaimConfig {
        key_prefix: c.key_prefix.unwrap_or(d.key_prefix),
        shards: positive("claims.shards", c.shards, d.shards)?,
        lease_ms: positive("claims.lease_ms", c.lease_ms, d.lease_ms)?,
        retention_secs: positive("claims.retention_secs", c.retention_secs, d.retention_secs)?,
        pool_size: positive("claims.pool_size", c.pool_size, d.pool_size)?,
        replica_acks: c.replica_acks.unwrap_or(d.replica_acks),
        replica_wait_ms: positive(
            "claims.replica_wait_ms",
            c.replica_wait_ms,
            d.replica_wait_ms,
        )?,
    };
    if claims.key_prefix.is_empty() || claims.key_prefix.contains(['{', '}']) {
        return Err(ConfigError::Invalid(
            "claims.key_prefix must be set, without braces".into(),
        ));
    }
    // Each shard keeps a pin that every start writes and reads (`claim::layout`).
    if claims.shards > crate::claim::MAX_SHARDS {
        return Err(ConfigError::Invalid(format!(
            "claims.shards is {}; at most {}",
            claims.shards,
            crate::claim::MAX_SHARDS
        )));
    }
    if claims.retention_secs * 1000 <= claims.lease_ms {
        return Err(ConfigError::Invalid(
            "claims.retention_secs must outlast claims.lease_ms".into(),
        ));
    }
    Ok(claims)
}

/// The `[budgets]` section: each scope `activity/scene`, each total not negative.
pub(super) fn check_budgets(budgets: &BTreeMap<String, i64>) -> Result<(), ConfigError> {
    for (scope, total) in budgets {
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
    Ok(())
}

/// Reward type → downstream, and reward type → the largest amount one grant may carry.
pub(super) type Downstreams = (HashMap<String, DownstreamConfig>, HashMap<String, i64>);

/// The `[downstreams.*]` sections.
pub(super) fn downstreams_of(
    raw: BTreeMap<String, RawDownstream>,
) -> Result<Downstreams, ConfigError> {
    let mut downstreams = HashMap::new();
    let mut max_amounts = HashMap::new();
    for (ty, d) in raw {
        if let Some(m) = d.max_amount {
            if !(1..=crate::claim::MAX_AMOUNT).contains(&m) {
                return Err(ConfigError::Invalid(format!(
                    "downstreams.{ty}.max_amount must be in 1..=2^53-1, not {m}"
                )));
            }
            max_amounts.insert(ty.clone(), m);
        }
        let parsed = downstream_of(&ty, d)?;
        downstreams.insert(ty, parsed);
    }
    Ok((downstreams, max_amounts))
}

/// One `[downstreams.{ty}]` section by its `kind`.
fn downstream_of(ty: &str, d: RawDownstream) -> Result<DownstreamConfig, ConfigError> {
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
                    ConfigError::Invalid(format!("downstreams.{ty}.capacity must be positive"))
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
            parsed
                .http()
                .map_err(|e| ConfigError::Invalid(format!("downstreams.{ty}: {e}")))?;
            parsed
        }
        other => {
            return Err(ConfigError::Invalid(format!(
                "downstreams.{ty}.kind {other:?}: expected \"ledger\" or \"http\""
            )));
        }
    };
    Ok(parsed)
}

/// The claim lease must outlast two of the slowest downstream's calls plus a margin.
pub(super) fn check_lease(
    claims: &ClaimConfig,
    downstreams: &HashMap<String, DownstreamConfig>,
) -> Result<(), ConfigError> {
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
    Ok(())
}

/// The service's credentials from the environment, all different.
pub(super) struct Credentials {
    pub grant: Credential,
    pub wallet: Credential,
    pub metrics: Option<Credential>,
    pub admin: Option<Credential>,
}

/// The grant, wallet, (optional) metrics and (optional) admin credentials from the
/// environment, all different.
pub(super) fn credentials(env: &[(String, String)]) -> Result<Credentials, ConfigError> {
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
    let admin = if Credential::is_set(env, "REWARD_ADMIN_TOKEN") {
        Some(credential_named(env, "REWARD_ADMIN_TOKEN")?)
    } else {
        None
    };
    if let Some(a) = &admin
        && (credential.same_as(a)
            || wallet_credential.same_as(a)
            || metrics_credential.as_ref().is_some_and(|m| m.same_as(a)))
    {
        return Err(ConfigError::Credential(
            "REWARD_ADMIN_TOKEN must differ from the grant, wallet and metrics credentials".into(),
        ));
    }
    Ok(Credentials {
        grant: credential,
        wallet: wallet_credential,
        metrics: metrics_credential,
        admin,
    })
}

/// The credential in `var`, or in the file `{var}_FILE` names.
fn credential_named(env: &[(String, String)], var: &str) -> Result<Credential, ConfigError> {
    Credential::from_env(env, var).map_err(|e| ConfigError::Credential(e.to_string()))
}

/// The `[wallet]` section: the session key ring (the file named, else the env) and
/// the CORS origins, checked.
pub(super) fn wallet_config(
    raw: RawWallet,
    env: &[(String, String)],
) -> Result<WalletConfig, ConfigError> {
    use sdk::session::{CURRENT_KEY_ENV, KEYS_ENV, KEYS_FILE_ENV};
    use sdk::token::KeyRing;
    let get = |k: &str| {
        env.iter()
            .find(|(n, v)| n == k && !v.trim().is_empty())
            .map(|(_, v)| v.clone())
    };
    let bad = |e: sdk::token::KeyRingError| ConfigError::Invalid(format!("session keys: {e}"));
    let current = match get(CURRENT_KEY_ENV) {
        Some(v) => Some(v.trim().parse().map_err(|_| {
            ConfigError::Invalid(format!("{CURRENT_KEY_ENV} is not a number 0..=65535"))
        })?),
        None => None,
    };
    if raw.session_keys_file.is_some() && (get(KEYS_ENV).is_some() || get(KEYS_FILE_ENV).is_some())
    {
        return Err(ConfigError::Invalid(format!(
            "wallet.session_keys_file and {KEYS_ENV}/{KEYS_FILE_ENV} are both set: keep one source of session keys"
        )));
    }
    let ring = match (raw.session_keys_file, get(KEYS_ENV), get(KEYS_FILE_ENV)) {
        (Some(path), _, _) => Some(KeyRing::from_file(&path, current).map_err(bad)?),
        (None, Some(text), _) => {
            let text = zeroize::Zeroizing::new(text);
            Some(KeyRing::parse(&text, current).map_err(bad)?)
        }
        (None, None, Some(path)) => {
            Some(KeyRing::from_file(std::path::Path::new(&path), current).map_err(bad)?)
        }
        (None, None, None) => None,
    };
    for o in &raw.cors_origins {
        check_origin(o)
            .map_err(|why| ConfigError::Invalid(format!("wallet.cors_origins: {o:?} {why}")))?;
    }
    Ok(WalletConfig {
        sessions: ring.map(sdk::session::SessionCodec::new),
        cors_origins: raw.cors_origins,
    })
}

/// An origin exactly as a browser sends it: `http(s)://host[:port]`, nothing after,
/// lower case, no default port (a browser never sends `:443` for https), so an
/// origin that would never match is refused at start-up instead.
fn check_origin(o: &str) -> Result<(), &'static str> {
    let (rest, default_port) = match (o.strip_prefix("https://"), o.strip_prefix("http://")) {
        (Some(r), _) => (r, ":443"),
        (None, Some(r)) => (r, ":80"),
        _ => return Err("must start with https:// or http:// (`*` is not allowed)"),
    };
    if rest.is_empty()
        || rest.contains(['/', '?', '#', '@', '*'])
        || !rest.chars().all(|c| c.is_ascii_graphic())
    {
        return Err("must be scheme://host[:port] with no path, user or wildcard");
    }
    if rest.chars().any(|c| c.is_ascii_uppercase()) {
        return Err("must be lower case, as browsers send it");
    }
    if rest.ends_with(default_port) {
        return Err("must leave out the scheme's default port, as browsers do");
    }
    Ok(())
}
