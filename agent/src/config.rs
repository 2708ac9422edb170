//! The agent's configuration: a TOML file, overridden by the environment
//! (`REWARD_AGENT__SECTION__KEY=value`, and `REWARD_SDK__SECTION__KEY=value` inside
//! `[sdk]`), like every binary of the pipeline.
//!
//! ```toml
//! [listen]
//! socket = "/run/reward-agent/agent.sock"  # the Unix socket (its directory is made)
//! socket_mode = "0660"                     # octal; who may connect may send rewards
//! socket_gid = 1001                        # optional: the socket's group (numeric)
//! tcp = "127.0.0.1:7075"                   # optional: loopback TCP, needs REWARD_AGENT_TOKEN
//!
//! [admin]
//! addr = "127.0.0.1:9475"                  # /metrics, /healthz, /readyz
//!
//! [drain]
//! timeout_ms = 10000                       # SIGTERM: calls finish, queue drains, spool closes
//!
//! [batch]
//! max_rewards = 1000                       # most rewards in one SendRewards
//!
//! [sdk]                                    # the SDK's own config (sdk::config)
//! default_queue = "massive"
//! # ...
//! ```
//!
//! The TCP credential and the token keys come from the environment (or files it
//! names), never from this file: `REWARD_AGENT_TOKEN` / `REWARD_AGENT_TOKEN_FILE`,
//! `REWARD_TOKEN_KEYS` / `REWARD_TOKEN_KEYS_FILE`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reward_runtime::credential::Credential;
use serde::Deserialize;

/// The prefix of the agent's environment overrides.
pub const ENV_PREFIX: &str = "REWARD_AGENT__";
/// The TCP listener's bearer credential (or `{TOKEN_VAR}_FILE`).
pub const TOKEN_VAR: &str = "REWARD_AGENT_TOKEN";
/// The most rewards a batch may hold: the pipeline's own batch limit.
pub const MAX_BATCH: usize = 1000;

/// Why a configuration was refused; the message names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read or parsed.
    #[error(transparent)]
    Document(#[from] reward_runtime::env::DocumentError),
    /// A value is out of range or inconsistent.
    #[error("{0}")]
    Invalid(String),
    /// The `[sdk]` section.
    #[error("sdk: {0}")]
    Sdk(#[from] sdk::config::ConfigError),
    /// The TCP credential.
    #[error(transparent)]
    Credential(#[from] reward_runtime::credential::CredentialError),
}

/// Where the agent listens.
#[derive(Debug, Clone)]
pub struct ListenConfig {
    /// The Unix socket's path.
    pub socket: PathBuf,
    /// The socket file's permission bits.
    pub socket_mode: u32,
    /// The socket file's group, when set.
    pub socket_gid: Option<u32>,
    /// Loopback TCP, with its credential, when set.
    pub tcp: Option<(SocketAddr, Credential)>,
}

/// The agent's whole configuration.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Where calls come in.
    pub listen: ListenConfig,
    /// `/metrics`, `/healthz`, `/readyz`.
    pub admin_addr: SocketAddr,
    /// How long a stop may take: calls in flight, then the SDK's close.
    pub drain: Duration,
    /// The most rewards in one `SendRewards`.
    pub max_batch: usize,
    /// The SDK the agent runs.
    pub sdk: sdk::config::SdkConfig,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    listen: RawListen,
    #[serde(default)]
    admin: RawAdmin,
    #[serde(default)]
    drain: RawDrain,
    #[serde(default)]
    batch: RawBatch,
    #[serde(default)]
    sdk: toml::Table,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawListen {
    socket: PathBuf,
    socket_mode: String,
    socket_gid: Option<u32>,
    tcp: Option<String>,
}

impl Default for RawListen {
    fn default() -> Self {
        Self {
            socket: PathBuf::from("/run/reward-agent/agent.sock"),
            socket_mode: "0660".into(),
            socket_gid: None,
            tcp: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawAdmin {
    addr: String,
}

impl Default for RawAdmin {
    fn default() -> Self {
        Self {
            addr: "127.0.0.1:9475".into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawDrain {
    timeout_ms: u64,
}

impl Default for RawDrain {
    fn default() -> Self {
        Self { timeout_ms: 10_000 }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawBatch {
    max_rewards: usize,
}

impl Default for RawBatch {
    fn default() -> Self {
        Self {
            max_rewards: MAX_BATCH,
        }
    }
}

fn invalid(msg: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(msg.into())
}

impl AgentConfig {
    /// Reads `path` and the process environment.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        reward_runtime::env::load(path, Self::from_toml_str)
    }

    /// Parses a document with the given environment (overrides and credential).
    ///
    /// ```
    /// let text = r#"
    /// [listen]
    /// socket = "/tmp/agent-doc.sock"
    /// [sdk]
    /// default_queue = "massive"
    /// [sdk.store]
    /// redis_url = "redis://127.0.0.1:16379"
    /// [sdk.producers.kafka]
    /// kind = "kafka"
    /// brokers = "127.0.0.1:19092"
    /// [sdk.producers.rocketmq]
    /// kind = "rocketmq"
    /// namesrv = "127.0.0.1:9876"
    /// group = "reward-agent"
    /// [sdk.queues.massive]
    /// topic = "reward-massive"
    /// primary = "kafka"
    /// backup = "rocketmq"
    /// [sdk.types.cash]
    /// [sdk.spool]
    /// dir = "/tmp/agent-doc-spool"
    /// "#;
    /// let cfg = reward_agent::AgentConfig::from_toml_str(text, &[]).unwrap();
    /// assert_eq!(cfg.listen.socket_mode, 0o660);
    /// assert!(cfg.listen.tcp.is_none());
    ///
    /// // TCP without its credential is refused, naming the variable.
    /// let env = vec![("REWARD_AGENT__LISTEN__TCP".to_string(), "127.0.0.1:7075".to_string())];
    /// let err = reward_agent::AgentConfig::from_toml_str(text, &env).unwrap_err();
    /// assert!(err.to_string().contains("REWARD_AGENT_TOKEN"), "{err}");
    /// ```
    pub fn from_toml_str(text: &str, env: &[(String, String)]) -> Result<Self, ConfigError> {
        let raw: Raw = reward_runtime::env::service_raw(text, env, ENV_PREFIX)?;
        let sdk = sdk::config::SdkConfig::from_table(&raw.sdk)?;
        // The agent's contract is "answered means durable": only direct writes keep
        // it (deferred and batched writes may answer before anything holds the
        // reward, which a caller in another process could never tell).
        if sdk.store.write_mode != sdk::config::WriteMode::Direct {
            return Err(invalid(format!(
                "sdk.store.write_mode {:?}: the agent answers only durable rewards; use \"direct\" (the default)",
                sdk.store.write_mode
            )));
        }
        let listen = listen_config(raw.listen, env)?;
        let admin_addr: SocketAddr = raw
            .admin
            .addr
            .parse()
            .map_err(|e| invalid(format!("admin.addr {:?}: {e}", raw.admin.addr)))?;
        if raw.drain.timeout_ms == 0 || raw.drain.timeout_ms > 600_000 {
            return Err(invalid(format!(
                "drain.timeout_ms {} must be 1..=600000",
                raw.drain.timeout_ms
            )));
        }
        if raw.batch.max_rewards == 0 || raw.batch.max_rewards > MAX_BATCH {
            return Err(invalid(format!(
                "batch.max_rewards {} must be 1..={MAX_BATCH}",
                raw.batch.max_rewards
            )));
        }
        Ok(Self {
            listen,
            admin_addr,
            drain: Duration::from_millis(raw.drain.timeout_ms),
            max_batch: raw.batch.max_rewards,
            sdk,
        })
    }
}

fn listen_config(raw: RawListen, env: &[(String, String)]) -> Result<ListenConfig, ConfigError> {
    if raw.socket.as_os_str().is_empty() || !raw.socket.is_absolute() {
        return Err(invalid(format!(
            "listen.socket {:?} must be an absolute path",
            raw.socket
        )));
    }
    // A Unix socket path is at most 107 bytes on Linux (sun_path).
    if raw.socket.as_os_str().len() > 107 {
        return Err(invalid(format!(
            "listen.socket is {} bytes; a Unix socket path holds at most 107",
            raw.socket.as_os_str().len()
        )));
    }
    let socket_mode = u32::from_str_radix(raw.socket_mode.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| {
            invalid(format!(
                "listen.socket_mode {:?} must be octal permission bits, e.g. \"0660\"",
                raw.socket_mode
            ))
        })?;
    if socket_mode & 0o200 == 0 {
        return Err(invalid(format!(
            "listen.socket_mode {:o}: the owner needs write permission to connect",
            socket_mode
        )));
    }
    let tcp = match raw.tcp.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
        None => None,
        Some(t) => {
            let addr: SocketAddr = t
                .parse()
                .map_err(|e| invalid(format!("listen.tcp {t:?}: {e}")))?;
            if !addr.ip().is_loopback() {
                return Err(invalid(format!(
                    "listen.tcp {addr}: the agent serves its own host only; use a loopback address"
                )));
            }
            Some((addr, Credential::from_env(env, TOKEN_VAR)?))
        }
    };
    Ok(ListenConfig {
        socket: raw.socket,
        socket_mode,
        socket_gid: raw.socket_gid,
        tcp,
    })
}
