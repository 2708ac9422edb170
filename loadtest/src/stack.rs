//! Where the local stack's servers are, and a fast check that each one answers.
//!
//! Addresses come from the env lines `ops/stack env` prints (`REDIS_URL`,
//! `KAFKA_BROKERS`, `ROCKETMQ_NAMESRV`); unset variables fall back to the loopback
//! defaults `ops/stack` uses, so a plain `cargo test` after `ops/stack up` works.
//!
//! Client libraries retry a dead address for a long time (librdkafka forever), so every
//! probe first opens a TCP connection with a short timeout and, if nothing answers,
//! fails at once with [`StackError::Unreachable`], whose message names the command that
//! starts the server.

use std::time::Duration;

use tokio::net::TcpStream;

/// The command that starts every server of the local stack.
pub const START_HINT: &str = "ops/stack up";

/// Loopback default of `REDIS_URL` (a non-default port, never a system Redis).
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:16379";
/// Loopback default of `KAFKA_BROKERS` (tansu).
pub const DEFAULT_KAFKA_BROKERS: &str = "127.0.0.1:19092";
/// Loopback default of `ROCKETMQ_NAMESRV`.
pub const DEFAULT_ROCKETMQ_NAMESRV: &str = "127.0.0.1:9876";

/// A server of the local stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// Redis: token store, idempotency records, budgets.
    Redis,
    /// The Kafka-protocol broker (tansu).
    Kafka,
    /// RocketMQ's name server.
    RocketMqNameServer,
    /// RocketMQ's broker (reached through the name server).
    RocketMqBroker,
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Redis => "Redis",
            Self::Kafka => "Kafka broker (tansu)",
            Self::RocketMqNameServer => "RocketMQ name server",
            Self::RocketMqBroker => "RocketMQ broker",
        })
    }
}

/// Why a server of the stack cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// Nothing answers at the address.
    #[error(
        "{server} at {addr} is not answering ({reason}); start the local stack with `{START_HINT}` (it prints the env lines to use)"
    )]
    Unreachable {
        /// Which server.
        server: Server,
        /// The address tried.
        addr: String,
        /// What the connection attempt said.
        reason: String,
    },
    /// An env variable holds something that is not an address.
    #[error("{var}={value:?} is not a valid address: {reason}")]
    BadAddress {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// Why it does not parse.
        reason: String,
    },
}

/// The addresses of the local stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackEnv {
    /// `redis://host:port[/db]`.
    pub redis_url: String,
    /// Comma-separated `host:port` bootstrap list.
    pub kafka_brokers: String,
    /// `host:port` of a RocketMQ name server.
    pub rocketmq_namesrv: String,
}

impl StackEnv {
    /// Reads `REDIS_URL`, `KAFKA_BROKERS` and `ROCKETMQ_NAMESRV`, with loopback defaults.
    pub fn from_env() -> Self {
        let var = |name: &str, default: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .unwrap_or_else(|| default.to_string())
        };
        Self {
            redis_url: var("REDIS_URL", DEFAULT_REDIS_URL),
            kafka_brokers: var("KAFKA_BROKERS", DEFAULT_KAFKA_BROKERS),
            rocketmq_namesrv: var("ROCKETMQ_NAMESRV", DEFAULT_ROCKETMQ_NAMESRV),
        }
    }

    /// `host:port` of the Redis URL.
    pub fn redis_host_port(&self) -> Result<String, StackError> {
        let bad = |reason: &str| StackError::BadAddress {
            var: "REDIS_URL",
            value: self.redis_url.clone(),
            reason: reason.to_string(),
        };
        let rest = self
            .redis_url
            .strip_prefix("redis://")
            .ok_or_else(|| bad("must start with redis://"))?;
        let rest = rest.rsplit_once('@').map_or(rest, |(_, hp)| hp);
        let host_port = rest.split('/').next().unwrap_or_default();
        if host_port.is_empty() {
            return Err(bad("no host"));
        }
        Ok(if host_port.contains(':') {
            host_port.to_string()
        } else {
            format!("{host_port}:6379")
        })
    }
}

/// Opens (and drops) one TCP connection to `addr` within `timeout`.
pub async fn check_reachable(
    server: Server,
    addr: &str,
    timeout: Duration,
) -> Result<(), StackError> {
    let unreachable = |reason: String| StackError::Unreachable {
        server,
        addr: addr.to_string(),
        reason,
    };
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => Err(unreachable(format!("no answer within {timeout:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(url: &str) -> StackEnv {
        StackEnv {
            redis_url: url.into(),
            kafka_brokers: DEFAULT_KAFKA_BROKERS.into(),
            rocketmq_namesrv: DEFAULT_ROCKETMQ_NAMESRV.into(),
        }
    }

    #[test]
    fn redis_host_port_forms() {
        assert_eq!(
            env("redis://127.0.0.1:16379").redis_host_port().unwrap(),
            "127.0.0.1:16379"
        );
        assert_eq!(env("redis://h/3").redis_host_port().unwrap(), "h:6379");
        assert_eq!(env("redis://u:p@h:1/0").redis_host_port().unwrap(), "h:1");
        assert!(matches!(
            env("http://h:1").redis_host_port(),
            Err(StackError::BadAddress {
                var: "REDIS_URL",
                ..
            })
        ));
    }

    #[tokio::test]
    async fn unreachable_names_the_start_command() {
        // Port 1 on loopback: nothing listens there.
        let err = check_reachable(Server::Redis, "127.0.0.1:1", Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            StackError::Unreachable {
                server: Server::Redis,
                ..
            }
        ));
        assert!(err.to_string().contains("ops/stack up"), "{err}");
    }
}
