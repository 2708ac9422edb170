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

/// The stack's address book (`ops/stack.ports`), the same file `ops/stack` reads.
const PORTS: &str = include_str!("../../ops/stack.ports");

/// A default port of the address book by its name (`REDIS_PORT`, ...). The file is
/// part of this build and checked by a test, so a missing name is a bug: 0, which no
/// server listens on, and every check fails loudly on it.
pub fn default_port(name: &str) -> u16 {
    PORTS
        .lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == name)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Loopback default of `REDIS_URL` (a non-default port, never a system Redis).
pub fn default_redis_url() -> String {
    format!("redis://127.0.0.1:{}", default_port("REDIS_PORT"))
}

/// Loopback default of `WALLET_REDIS_URL`: the stand-in wallet's own Redis.
pub fn default_wallet_redis_url() -> String {
    format!("redis://127.0.0.1:{}", default_port("WALLET_PORT"))
}

/// Loopback default of `KAFKA_BROKERS` (Apache Kafka, one KRaft node).
pub fn default_kafka_brokers() -> String {
    format!("127.0.0.1:{}", default_port("KAFKA_PORT"))
}

/// Loopback default of `ROCKETMQ_NAMESRV`.
pub fn default_rocketmq_namesrv() -> String {
    format!("127.0.0.1:{}", default_port("NAMESRV_PORT"))
}

/// A server of the local stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// Redis: token store, idempotency records, budgets.
    Redis,
    /// The Kafka broker (Apache Kafka).
    Kafka,
    /// RocketMQ's name server.
    RocketMqNameServer,
    /// RocketMQ's broker (reached through the name server).
    RocketMqBroker,
    /// The stand-in wallet's Redis (the built-in ledger).
    WalletRedis,
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Redis => "Redis",
            Self::Kafka => "Kafka broker",
            Self::RocketMqNameServer => "RocketMQ name server",
            Self::RocketMqBroker => "RocketMQ broker",
            Self::WalletRedis => "the wallet's Redis",
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
    /// `redis://host:port[/db]`, or `redis-cluster://host:port?node=host:port&...` for a
    /// Redis Cluster (fred reads both; every component takes either).
    pub redis_url: String,
    /// The stand-in wallet's Redis (the reward service's built-in ledger), apart from
    /// the pipeline's so that its credits are never counted as the pipeline's work.
    pub wallet_redis_url: String,
    /// Comma-separated `host:port` bootstrap list.
    pub kafka_brokers: String,
    /// `host:port` of a RocketMQ name server.
    pub rocketmq_namesrv: String,
}

impl StackEnv {
    /// The first Kafka bootstrap address (`host:port`), the one a reachability check
    /// dials; empty when none is set.
    pub fn first_kafka_broker(&self) -> &str {
        self.kafka_brokers
            .split(',')
            .next()
            .unwrap_or_default()
            .trim()
    }

    /// Reads `REDIS_URL`, `WALLET_REDIS_URL`, `KAFKA_BROKERS` and `ROCKETMQ_NAMESRV`,
    /// with loopback defaults.
    pub fn from_env() -> Self {
        let var = |name: &str, default: fn() -> String| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .unwrap_or_else(default)
        };
        Self {
            redis_url: var("REDIS_URL", default_redis_url),
            wallet_redis_url: var("WALLET_REDIS_URL", default_wallet_redis_url),
            kafka_brokers: var("KAFKA_BROKERS", default_kafka_brokers),
            rocketmq_namesrv: var("ROCKETMQ_NAMESRV", default_rocketmq_namesrv),
        }
    }

    /// `host:port` of the Redis URL (a cluster URL's first node).
    pub fn redis_host_port(&self) -> Result<String, StackError> {
        host_port("REDIS_URL", &self.redis_url)
    }

    /// `host:port` of the wallet's Redis URL.
    pub fn wallet_host_port(&self) -> Result<String, StackError> {
        host_port("WALLET_REDIS_URL", &self.wallet_redis_url)
    }
}

/// `host:port` of a Redis URL held by env variable `var` (a cluster URL's first node).
fn host_port(var: &'static str, url: &str) -> Result<String, StackError> {
    let bad = |reason: &str| StackError::BadAddress {
        var,
        value: without_credentials(url),
        reason: reason.to_string(),
    };
    let rest = url
        .strip_prefix("redis://")
        .or_else(|| url.strip_prefix("redis-cluster://"))
        .ok_or_else(|| bad("must start with redis:// or redis-cluster://"))?;
    let rest = rest.split('?').next().unwrap_or_default();
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

/// `url` with whatever stands before an `@` in its authority (a user and password)
/// replaced by `***`, for errors and logs.
pub fn without_credentials(url: &str) -> String {
    let (scheme, userinfo, host, tail) = url_parts(url);
    if userinfo.is_none() {
        return url.to_string();
    }
    let sep = if scheme.is_empty() { "" } else { "://" };
    format!("{scheme}{sep}***@{host}{tail}")
}

/// A URL's parts: scheme (empty when there is no `://`), the user information before
/// an `@` if any, `host:port`, and the rest (path and query).
pub fn url_parts(url: &str) -> (&str, Option<&str>, &str, &str) {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((user, host)) => (scheme, Some(user), host, tail),
        None => (scheme, None, authority, tail),
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

/// Forks Redis has made since it started, from an `INFO stats` reply (`total_forks`).
pub fn total_forks(info: &str) -> Option<u64> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix("total_forks:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Watches Redis for forks across a timed run.
///
/// Redis forks for every AOF rewrite (started by itself when the AOF has doubled; the
/// benches' writes and deletes do that) and every RDB save, and the fork and the
/// child's copy of the whole dataset slow every client meanwhile: a rewrite of a large
/// dataset lasts seconds and pulls down the ratio of a bench it overlaps
/// (docs/findings/benchmarks-history.md). Only the side of a bench that uses Redis
/// pays, so a bench that saw a fork says so next to its figures
/// (`redis-cli config set auto-aof-rewrite-percentage 0` for the runs avoids it;
/// BENCHMARKS.md).
#[derive(Debug, Clone)]
pub struct ForkWatch {
    client: Option<fred::clients::Client>,
    before: Option<u64>,
}

impl ForkWatch {
    /// Reads the count now. A Redis that cannot be asked makes a watch that reports
    /// `None` (the bench itself then fails on its own Redis use, more clearly).
    pub async fn start(redis_url: &str) -> Self {
        use fred::prelude::*;
        let connect = async {
            let client = Builder::from_config(Config::from_url(redis_url).ok()?)
                .build()
                .ok()?;
            let connected = tokio::time::timeout(Duration::from_secs(5), client.init()).await;
            matches!(connected, Ok(Ok(_))).then_some(client)
        };
        let client = connect.await;
        let before = match &client {
            Some(c) => read_forks(c).await,
            None => None,
        };
        ForkWatch { client, before }
    }

    /// Forks since [`ForkWatch::start`]; `None` when Redis could not tell.
    pub async fn since_start(&self) -> Option<u64> {
        let (client, before) = (self.client.as_ref()?, self.before?);
        let now = read_forks(client).await?;
        Some(now.saturating_sub(before))
    }
}

async fn read_forks(client: &fred::clients::Client) -> Option<u64> {
    use fred::interfaces::ClientLike as _;
    use fred::types::{ClusterHash, CustomCommand};
    let info: String = client
        .custom(
            CustomCommand::new_static("INFO", ClusterHash::FirstKey, false),
            vec!["stats"],
        )
        .await
        .ok()?;
    total_forks(&info)
}

/// The line a bench prints under its figures when Redis forked during the run.
pub fn fork_warning(forks: Option<u64>) -> Option<String> {
    match forks {
        Some(0) => None,
        Some(n) => Some(format!(
            "warning: Redis forked {n} time(s) during the timed runs (an AOF rewrite or RDB save); \
             the side that uses Redis measured low. For benchmarks: \
             redis-cli -p PORT config set auto-aof-rewrite-percentage 0 (and back to 100 after)"
        )),
        None => Some("note: could not read Redis's fork count (INFO stats); an AOF rewrite during the run would go unnoticed".into()),
    }
}

/// librdkafka settings as the `settings` line of a `[producers.NAME]` TOML table.
pub fn kafka_settings_toml(settings: &std::collections::BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = settings
        .iter()
        .map(|(k, v)| format!("{k:?} = {v:?}"))
        .collect();
    format!("settings = {{ {} }}", pairs.join(", "))
}

/// A virtual queue of an [`SdkSection`]: its topic and its two producers (`kafka` or
/// `rocketmq`), with `ratio` % of users sent to the primary first.
#[derive(Debug, Clone, Copy)]
pub struct QueueSpec<'a> {
    /// The queue's name.
    pub name: &'a str,
    /// Its topic.
    pub topic: &'a str,
    /// The producer tried first.
    pub primary: &'a str,
    /// The producer tried next.
    pub backup: &'a str,
    /// Share of users (uid % 100) sent to the primary first.
    pub ratio: u8,
}

/// The `[sdk]` section of a config aimed at this stack, as services, consumers, the
/// load tester and tests write it: producers `kafka` and `rocketmq` at the stack's addresses, the given queues (the first is the default
/// queue) and reward types (with their queue when not the default).
#[derive(Debug, Clone)]
pub struct SdkSection<'a> {
    /// Where the servers are.
    pub env: &'a StackEnv,
    /// The token key ring file.
    pub keys_file: &'a std::path::Path,
    /// Token and token-store TTL, seconds.
    pub ttl_secs: u64,
    /// The token store's key prefix.
    pub store_prefix: &'a str,
    /// The token store's Redis timeout, milliseconds (the SDK's default when `None`).
    pub store_timeout_ms: Option<u64>,
    /// The RocketMQ producer group.
    pub rocketmq_group: &'a str,
    /// The virtual queues.
    pub queues: &'a [QueueSpec<'a>],
    /// Reward types and, when not the default queue, their queue.
    pub types: &'a [(&'a str, Option<&'a str>)],
    /// The spool directory.
    pub spool: &'a std::path::Path,
}

impl SdkSection<'_> {
    /// The section as TOML text.
    pub fn toml(&self) -> String {
        let mut out = format!(
            "[sdk]\ndefault_queue = {default:?}\n\
             [sdk.token]\nkeys_file = {keys:?}\nttl_secs = {ttl}\n\
             [sdk.store]\nredis_url = {redis:?}\nkey_prefix = {prefix:?}\n\
             ttl_secs = {ttl}\n{timeout}\
             [sdk.producers.kafka]\nkind = \"kafka\"\nbrokers = {kafka:?}\n\
             [sdk.producers.rocketmq]\nkind = \"rocketmq\"\nnamesrv = {namesrv:?}\ngroup = {group:?}\n",
            default = self.queues.first().map_or("", |q| q.name),
            keys = self.keys_file.display().to_string(),
            ttl = self.ttl_secs,
            redis = self.env.redis_url,
            prefix = self.store_prefix,
            timeout = self
                .store_timeout_ms
                .map_or(String::new(), |ms| format!("timeout_ms = {ms}\n")),
            kafka = self.env.kafka_brokers,
            namesrv = self.env.rocketmq_namesrv,
            group = self.rocketmq_group,
        );
        for q in self.queues {
            out.push_str(&format!(
                "[sdk.queues.{}]\ntopic = {:?}\nprimary = {:?}\nbackup = {:?}\nratio = {}\n",
                q.name, q.topic, q.primary, q.backup, q.ratio
            ));
        }
        for (t, queue) in self.types {
            out.push_str(&format!("[sdk.types.{t}]\n"));
            if let Some(q) = queue {
                out.push_str(&format!("queue = {q:?}\n"));
            }
        }
        out.push_str(&format!(
            "[sdk.spool]\ndir = {:?}\n",
            self.spool.display().to_string()
        ));
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn env(url: &str) -> StackEnv {
        StackEnv {
            redis_url: url.into(),
            wallet_redis_url: default_wallet_redis_url(),
            kafka_brokers: default_kafka_brokers(),
            rocketmq_namesrv: default_rocketmq_namesrv(),
        }
    }

    #[test]
    fn the_address_book_names_every_port() {
        for name in [
            "REDIS_PORT",
            "WALLET_PORT",
            "KAFKA_PORT",
            "NAMESRV_PORT",
            "BROKER_PORT",
            "CLUSTER_PORT",
        ] {
            assert_ne!(default_port(name), 0, "{name}");
        }
        assert_eq!(default_redis_url(), "redis://127.0.0.1:16379");
        assert_eq!(default_port("NO_SUCH_PORT"), 0);
    }

    #[test]
    fn the_sdk_section_is_a_valid_sdk_config() {
        let e = env(&default_redis_url());
        let queues = [
            QueueSpec {
                name: "massive",
                topic: "t-massive",
                primary: "kafka",
                backup: "rocketmq",
                ratio: 100,
            },
            QueueSpec {
                name: "special",
                topic: "t-special",
                primary: "rocketmq",
                backup: "kafka",
                ratio: 50,
            },
        ];
        let text = SdkSection {
            env: &e,
            keys_file: std::path::Path::new("/tmp/keys"),
            ttl_secs: 3600,
            store_prefix: "tok-x",
            store_timeout_ms: Some(10_000),
            rocketmq_group: "g-x",
            queues: &queues,
            types: &[("cash", None), ("coupon", Some("special"))],
            spool: std::path::Path::new("/tmp/spool"),
        }
        .toml();
        let doc: toml::Table = text.parse().unwrap_or_else(|e| panic!("{e}\n{text}"));
        let sdk = doc["sdk"].as_table().cloned().unwrap_or_default();
        let cfg =
            sdk::config::SdkConfig::from_table(&sdk).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(cfg.routing.default_queue, "massive");
        assert_eq!(cfg.routing.queues["special"].ratio, 50);
        assert_eq!(
            cfg.routing.types["coupon"].queue.as_deref(),
            Some("special")
        );
        assert_eq!(cfg.store.key_prefix, "tok-x");
    }

    #[test]
    fn credentials_never_reach_an_error() {
        let e = env("rediss://u:s3cret@h:1/0")
            .redis_host_port()
            .unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        assert!(e.to_string().contains("***@h:1/0"), "{e}");
        assert_eq!(without_credentials("redis://h:1"), "redis://h:1");
        assert_eq!(without_credentials("u:p@h:1"), "***@h:1");
    }

    #[test]
    fn redis_host_port_forms() {
        assert_eq!(
            env("redis://127.0.0.1:16379").redis_host_port().unwrap(),
            "127.0.0.1:16379"
        );
        assert_eq!(env("redis://h/3").redis_host_port().unwrap(), "h:6379");
        assert_eq!(env("redis://u:p@h:1/0").redis_host_port().unwrap(), "h:1");
        assert_eq!(
            env("redis-cluster://127.0.0.1:17000?node=127.0.0.1:17001")
                .redis_host_port()
                .unwrap(),
            "127.0.0.1:17000"
        );
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

    #[test]
    fn fork_count_is_read_from_info_stats() {
        let info =
            "# Stats\r\ntotal_connections_received:12\r\ntotal_forks:13\r\nexpired_keys:0\r\n";
        assert_eq!(total_forks(info), Some(13));
        assert_eq!(total_forks("# Stats\r\ntotal_forks:x\r\n"), None);
        assert_eq!(total_forks("# Stats\r\n"), None);
        assert_eq!(fork_warning(Some(0)), None);
        assert!(fork_warning(Some(2)).is_some_and(|w| w.contains("forked 2 time")));
        assert!(fork_warning(None).is_some_and(|w| w.contains("could not read")));
    }
}
