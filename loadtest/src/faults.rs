//! Fault plans for a replay (`--faults plan.toml`): break things on purpose at given
//! offsets and check that reconciliation still passes.
//!
//! ```toml
//! [[faults]]
//! at_secs = 10
//! action = "kill-consumer"     # kill -9 a Kafka consumer, start it again after for_secs
//! for_secs = 3
//!
//! [[faults]]
//! at_secs = 20
//! action = "stop-server"       # `ops/stack stop <server>`, start it after for_secs
//! server = "kafka"             # kafka, broker (RocketMQ), namesrv or redis
//! for_secs = 10
//!
//! [[faults]]
//! at_secs = 30
//! action = "downstream-fail"   # the downstream answers 503 to this share of credits
//! share = 0.3
//! for_secs = 10
//!
//! [[faults]]
//! at_secs = 45
//! action = "downstream-slow"   # every credit waits this long (at most 1 000 ms)
//! delay_ms = 300
//! for_secs = 10
//!
//! [[faults]]
//! at_secs = 50
//! action = "downstream-timeout-after-credit"   # the double credits, then answers
//! share = 0.5                  # after the service's timeout, for this share of credits
//! for_secs = 5
//!
//!
//! [[faults]]
//! at_secs = 15
//! action = "kill-service"      # kill -9 a reward service instance (`index`, default 0)
//! for_secs = 3                 # in the middle of its batches; restart it on the same
//!                              # address after for_secs (with --services 2 the others
//!                              # carry the load meanwhile)
//!
//! [[faults]]
//! at_secs = 12
//! action = "kill-sdk-host"     # kill -9 an SDK host (`index`, default 0): the events it
//! for_secs = 3                 # accepted but still held in memory die with it (their
//!                              # stored tokens are granted by the service's sweeper);
//!                              # the replay runs the SDK in child processes for this
//!                              # (`--sdk-hosts`, at least 2); restarted after for_secs
//!
//! [[faults]]
//! at_secs = 25
//! action = "stop-brokers"      # Kafka and the RocketMQ broker both go away: the SDK
//! for_secs = 30                # spools to disk and replays when one is back
//!
//! [[faults]]
//! at_secs = 10
//! action = "redis-reshard"     # Redis Cluster only: move `slots` slots (keys migrate
//! slots = 2000                 # live, clients see MOVED/ASK) between two primaries
//!
//! [[faults]]
//! at_secs = 20
//! action = "redis-failover"    # Redis Cluster only: kill -9 a primary; its replica
//! for_secs = 10                # takes over; the node comes back as a replica (a
//!                              # failover due during a reshard waits for its end)
//!
//! [[faults]]
//! at_secs = 20
//! action = "redis-pause"       # `CLIENT PAUSE` the stack's Redis: every client's
//! for_secs = 2                 # commands wait (at most 60 s), nothing is lost
//!
//! [[faults]]
//! at_secs = 10
//! action = "latency"           # network faults, on one link through a fault proxy
//! link = "service->redis"      # (below): every chunk delayed delay_ms ± jitter_ms
//! delay_ms = 200
//! jitter_ms = 20
//! for_secs = 20
//!
//! [[faults]]
//! at_secs = 10
//! action = "blackhole"         # connections accepted, nothing answered (held bytes
//! link = "consumer->redis"     # flow on when it lifts, as TCP would resend them)
//! for_secs = 10
//!
//! [[faults]]
//! at_secs = 10
//! action = "drop-answers"      # requests arrive, answers are thrown away; each
//! link = "service->wallet"     # connection that lost one is reset when it lifts
//! for_secs = 10
//!
//! [[faults]]
//! at_secs = 10
//! action = "reset"             # every connection reset, open or new
//! link = "sdk->redis"
//! for_secs = 3
//!
//! [[faults]]
//! at_secs = 10
//! action = "bandwidth"         # each direction capped, over every connection
//! link = "service->redis"
//! bytes_per_sec = 200000
//! for_secs = 10
//! ```
//!
//! # Network links
//! A plan that names a link runs a [`faultproxy::Proxy`] on loopback for it, in the
//! load tester's process, and points that part's connections through it for the whole
//! run (the proxy passes bytes untouched until a fault switches it): `sdk->redis` (the
//! activity side's token writes: the SDK in the load tester or every SDK host),
//! `service->redis` (every reward service instance: claims, ledger, sweeper, its
//! SDK), `consumer->redis` (every consumer: fleet leases, delay queue) and
//! `service->wallet` (the credits and status queries to the downstream, which puts
//! the downstream double in place). Redis links need the single Redis: a cluster's
//! clients learn every node's address from the cluster itself and would go around a
//! proxy. The brokers' links are not offered for the same reason: Kafka and RocketMQ
//! clients connect to the addresses the brokers advertise, not to the ones they were
//! given.
//!
//! A plan with a downstream fault makes the replay credit through a downstream double
//! over HTTP ([`reward_standins::downstream`]) instead of the service's built-in ledger directly
//! (the double credits the same ledger), so those faults can be switched on and off.
//!
//! Servers are stopped and started through `ops/stack` (the same script that started
//! them), so a drill exercises the real processes: the Kafka broker really goes away,
//! and Redis restarts from its AOF.

use std::path::Path;

use serde::Deserialize;

/// What to break.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// SIGKILL one consumer (the first Kafka member unless `index` says otherwise),
    /// then start it again.
    KillConsumer,
    /// Stop one server of the local stack, then start it again.
    StopServer,
    /// Redis Cluster: SIGKILL a primary (`ops/stack kill-primary`), start the node
    /// again after `for_secs` (it rejoins as a replica).
    RedisFailover,
    /// Redis Cluster: move `slots` slots between two primaries while the run goes on.
    RedisReshard,
    /// SIGKILL one reward service instance (`index`, default 0), then start it again
    /// on the same address.
    KillService,
    /// SIGKILL one SDK host (`index`, default 0), then start it again: the activity
    /// service's process dies with events in its memory.
    KillSdkHost,
    /// Stop both brokers (Kafka and the RocketMQ broker), start them again after
    /// `for_secs`: the SDK has nowhere to send and spools.
    StopBrokers,
    /// The downstream fails `share` of credits (503, nothing credited).
    DownstreamFail,
    /// The downstream holds every credit `delay_ms` before answering.
    DownstreamSlow,
    /// The downstream credits `share` of calls, then answers after the service's
    /// timeout: the in-doubt case.
    DownstreamTimeoutAfterCredit,
    /// Redis holds every client's commands for `for_secs` (`CLIENT PAUSE ... ALL`):
    /// a slow Redis, as the SDK's token writes, the claims and the ledger all see it.
    RedisPause,
    /// Network: every chunk on `link` delayed `delay_ms` ± `jitter_ms`.
    Latency,
    /// Network: `link` accepts and never answers.
    Blackhole,
    /// Network: every connection on `link` reset, open or new.
    Reset,
    /// Network: requests on `link` arrive, answers are thrown away.
    DropAnswers,
    /// Network: `link` capped at `bytes_per_sec` each way.
    Bandwidth,
}

impl Action {
    /// Whether it is a network fault (it needs a `link`).
    pub fn is_network(&self) -> bool {
        matches!(
            self,
            Self::Latency | Self::Blackhole | Self::Reset | Self::DropAnswers | Self::Bandwidth
        )
    }
}

/// A connection from one part of the pipeline to a server it uses, which a fault
/// proxy can sit on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Link {
    /// The activity side (the SDK in the load tester, or every SDK host) to Redis.
    SdkRedis,
    /// Every reward service instance to Redis.
    ServiceRedis,
    /// Every consumer to Redis.
    ConsumerRedis,
    /// The reward service to the downstream (the downstream double).
    ServiceWallet,
}

impl Link {
    /// Every link, as plans name them.
    pub const ALL: [(&'static str, Link); 4] = [
        ("sdk->redis", Link::SdkRedis),
        ("service->redis", Link::ServiceRedis),
        ("consumer->redis", Link::ConsumerRedis),
        ("service->wallet", Link::ServiceWallet),
    ];

    /// The link a plan names.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        if let Some((_, l)) = Self::ALL.iter().find(|(n, _)| *n == s) {
            return Ok(*l);
        }
        if s.ends_with("->kafka") || s.ends_with("->rocketmq") || s.ends_with("->broker") {
            anyhow::bail!(
                "link {s:?}: broker links are not offered: Kafka and RocketMQ clients connect to the addresses the brokers advertise, around any proxy they were pointed at"
            );
        }
        let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
        anyhow::bail!("unknown link {s:?}; one of {}", names.join(", "))
    }

    /// As plans name it.
    pub fn name(&self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, l)| l == self)
            .map_or("?", |(n, _)| *n)
    }

    /// Whether the server at its end is Redis.
    pub fn to_redis(&self) -> bool {
        !matches!(self, Link::ServiceWallet)
    }
}

/// The links a plan's network faults use (each gets its proxy for the whole run).
pub fn links(faults: &[Fault]) -> std::collections::BTreeSet<Link> {
    faults
        .iter()
        .filter(|f| f.action.is_network())
        .filter_map(|f| f.link.as_deref().and_then(|l| Link::parse(l).ok()))
        .collect()
}

/// One fault.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// Seconds after sending starts.
    pub at_secs: f64,
    /// What to do.
    pub action: Action,
    /// `stop-server`: which (`kafka`, `broker`, `namesrv`, `redis`).
    #[serde(default)]
    pub server: Option<String>,
    /// `kill-consumer`: which Kafka member; `kill-service`: which instance (0-based).
    #[serde(default)]
    pub index: Option<u32>,
    /// How long the thing stays down.
    #[serde(default = "five")]
    pub for_secs: f64,
    /// `downstream-fail`: share of credits failed, 0..=1; `downstream-timeout-after-credit`:
    /// share of credits answered late (default 1).
    #[serde(default)]
    pub share: Option<f64>,
    /// `downstream-slow`: delay per credit, ms.
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// `redis-reshard`: slots to move (default 2000).
    #[serde(default)]
    pub slots: Option<u32>,
    /// Network faults: which link (`service->redis`, ...; see the module doc).
    #[serde(default)]
    pub link: Option<String>,
    /// `latency`: the spread around `delay_ms`, ms (default 0).
    #[serde(default)]
    pub jitter_ms: Option<u64>,
    /// `bandwidth`: the cap, bytes a second each way.
    #[serde(default)]
    pub bytes_per_sec: Option<u64>,
}

/// The longest added latency a plan may ask for, ms.
pub const MAX_LATENCY_MS: u64 = 10_000;

/// Whether any fault of the plan breaks the downstream (the replay then credits
/// through the downstream double).
pub fn needs_downstream_double(faults: &[Fault]) -> bool {
    faults.iter().any(|f| {
        matches!(
            f.action,
            Action::DownstreamFail | Action::DownstreamSlow | Action::DownstreamTimeoutAfterCredit
        )
    }) || links(faults).contains(&Link::ServiceWallet)
}

fn five() -> f64 {
    5.0
}

/// Whether a fault of the plan can leave the activity side's token writes in doubt
/// (refused after an attempt whose answer was lost, which may still have landed):
/// anything that breaks the SDK's way to Redis. Such a run's sweeper takes the short
/// grace period, so the drain sees the ones that landed credited.
pub fn token_writes_in_doubt(faults: &[Fault]) -> bool {
    faults.iter().any(|f| match f.action {
        Action::StopServer => f.server.as_deref() == Some("redis"),
        Action::RedisPause | Action::RedisFailover | Action::RedisReshard => true,
        _ => f.action.is_network() && f.link().is_ok_and(|l| l == Link::SdkRedis),
    })
}

/// SDK hosts a plan needs: `asked` (`--sdk-hosts`), or 2 when a fault kills a host
/// and none were asked; a kill with fewer than 2 hosts is refused (the users of the
/// killed host would have nowhere to go), as is an `index` past the hosts.
pub fn sdk_hosts(faults: &[Fault], asked: Option<u32>) -> anyhow::Result<u32> {
    let kills: Vec<&Fault> = faults
        .iter()
        .filter(|f| f.action == Action::KillSdkHost)
        .collect();
    let n = match asked {
        Some(n) => n,
        None if kills.is_empty() => 0,
        None => 2,
    };
    if !kills.is_empty() && n < 2 {
        anyhow::bail!("a kill-sdk-host fault needs --sdk-hosts 2 or more (got {n})");
    }
    if let Some(f) = kills.iter().find(|f| f.index.unwrap_or(0) >= n) {
        anyhow::bail!(
            "kill-sdk-host index {} is past the {n} SDK hosts",
            f.index.unwrap_or(0)
        );
    }
    Ok(n)
}

impl Fault {
    /// A short label for the report's timeline.
    pub fn label(&self) -> String {
        match self.action {
            Action::KillConsumer => format!(
                "kill -9 consumer {} ({} s down)",
                self.index.unwrap_or(0),
                self.for_secs
            ),
            Action::RedisFailover => {
                format!("kill -9 a Redis primary ({} s down)", self.for_secs)
            }
            Action::RedisReshard => format!("reshard {} slots", self.slots.unwrap_or(2000)),
            Action::KillService => format!(
                "kill -9 service {} ({} s down)",
                self.index.unwrap_or(0),
                self.for_secs
            ),
            Action::KillSdkHost => format!(
                "kill -9 SDK host {} ({} s down)",
                self.index.unwrap_or(0),
                self.for_secs
            ),
            Action::StopBrokers => format!("stop both brokers ({} s down)", self.for_secs),
            Action::StopServer => format!(
                "stop {} ({} s down)",
                self.server.as_deref().unwrap_or("?"),
                self.for_secs
            ),
            Action::DownstreamFail => format!(
                "downstream fails {:.0}% for {} s",
                self.share.unwrap_or(0.0) * 100.0,
                self.for_secs
            ),
            Action::DownstreamSlow => format!(
                "downstream +{} ms for {} s",
                self.delay_ms.unwrap_or(0),
                self.for_secs
            ),
            Action::RedisPause => format!("Redis paused (CLIENT PAUSE) for {} s", self.for_secs),
            Action::DownstreamTimeoutAfterCredit => format!(
                "downstream answers {:.0}% after crediting, past the timeout, for {} s",
                self.share.unwrap_or(1.0) * 100.0,
                self.for_secs
            ),
            Action::Latency => format!(
                "latency {} +{} ms ±{} ms for {} s",
                self.link_name(),
                self.delay_ms.unwrap_or(0),
                self.jitter_ms.unwrap_or(0),
                self.for_secs
            ),
            Action::Blackhole => format!("blackhole {} for {} s", self.link_name(), self.for_secs),
            Action::Reset => format!("reset {} for {} s", self.link_name(), self.for_secs),
            Action::DropAnswers => {
                format!("drop answers {} for {} s", self.link_name(), self.for_secs)
            }
            Action::Bandwidth => format!(
                "bandwidth {} {} B/s for {} s",
                self.link_name(),
                self.bytes_per_sec.unwrap_or(0),
                self.for_secs
            ),
        }
    }

    fn link_name(&self) -> &str {
        self.link.as_deref().unwrap_or("?")
    }

    /// A network fault's link (checked by [`parse`]).
    pub fn link(&self) -> anyhow::Result<Link> {
        Link::parse(self.link.as_deref().unwrap_or_default())
    }

    /// A network fault's proxy mode while it lasts.
    pub fn proxy_mode(&self) -> Option<faultproxy::Mode> {
        use faultproxy::Mode;
        Some(match self.action {
            Action::Latency => Mode::Latency {
                delay: std::time::Duration::from_millis(self.delay_ms.unwrap_or(0)),
                jitter: std::time::Duration::from_millis(self.jitter_ms.unwrap_or(0)),
            },
            Action::Blackhole => Mode::Blackhole,
            Action::Reset => Mode::Reset,
            Action::DropAnswers => Mode::DropAnswers,
            Action::Bandwidth => Mode::Bandwidth {
                bytes_per_sec: self.bytes_per_sec.unwrap_or(1),
            },
            _ => return None,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    faults: Vec<Fault>,
}

/// Reads and checks a fault plan.
pub fn load(path: &Path) -> anyhow::Result<Vec<Fault>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read fault plan {}: {e}", path.display()))?;
    parse(&text).map_err(|e| anyhow::anyhow!("fault plan {}: {e}", path.display()))
}

/// Parses and checks fault plan text.
pub fn parse(text: &str) -> anyhow::Result<Vec<Fault>> {
    let plan: PlanFile = toml::from_str(text)?;
    for (i, f) in plan.faults.iter().enumerate() {
        if f.action.is_network() {
            check_network(f).map_err(|e| anyhow::anyhow!("faults[{i}]: {e}"))?;
        } else if f.link.is_some() || f.jitter_ms.is_some() || f.bytes_per_sec.is_some() {
            anyhow::bail!("faults[{i}]: link, jitter_ms and bytes_per_sec are for network faults");
        }
        if !(f.at_secs.is_finite() && f.at_secs >= 0.0) {
            anyhow::bail!("faults[{i}]: at_secs must be >= 0");
        }
        if !(f.for_secs.is_finite() && f.for_secs >= 0.0 && f.for_secs <= 3600.0) {
            anyhow::bail!("faults[{i}]: for_secs must be in 0..=3600");
        }
        match f.action {
            Action::StopServer => match f.server.as_deref() {
                Some("kafka" | "broker" | "namesrv" | "redis") => {}
                other => anyhow::bail!(
                    "faults[{i}]: stop-server needs server = kafka, broker, namesrv or redis, got {other:?}"
                ),
            },
            Action::KillConsumer | Action::KillService | Action::KillSdkHost => {
                if f.server.is_some() {
                    anyhow::bail!(
                        "faults[{i}]: kill-consumer, kill-service and kill-sdk-host take no server"
                    );
                }
            }
            Action::StopBrokers => {
                if f.server.is_some() {
                    anyhow::bail!(
                        "faults[{i}]: stop-brokers stops both brokers; it takes no server"
                    );
                }
            }
            Action::RedisFailover => {}
            Action::RedisReshard => {
                if !(1..=16384).contains(&f.slots.unwrap_or(2000)) {
                    anyhow::bail!("faults[{i}]: redis-reshard needs slots in 1..=16384");
                }
            }
            Action::RedisPause => {
                if !(f.for_secs > 0.0 && f.for_secs <= 60.0) {
                    anyhow::bail!("faults[{i}]: redis-pause needs for_secs in (0, 60]");
                }
            }
            Action::DownstreamFail => match f.share {
                Some(s) if (0.0..=1.0).contains(&s) => {}
                other => anyhow::bail!(
                    "faults[{i}]: downstream-fail needs share in 0..=1, got {other:?}"
                ),
            },
            Action::DownstreamTimeoutAfterCredit => match f.share {
                None => {}
                Some(s) if (0.0..=1.0).contains(&s) => {}
                other => anyhow::bail!(
                    "faults[{i}]: downstream-timeout-after-credit takes share in 0..=1, got {other:?}"
                ),
            },
            Action::Latency
            | Action::Blackhole
            | Action::Reset
            | Action::DropAnswers
            | Action::Bandwidth => {}
            Action::DownstreamSlow => match f.delay_ms {
                Some(d) if d <= reward_standins::downstream::MAX_DELAY_MS => {}
                other => anyhow::bail!(
                    "faults[{i}]: downstream-slow needs delay_ms in 0..={} (below the service's timeout, so a credit is never ambiguous), got {other:?}",
                    reward_standins::downstream::MAX_DELAY_MS
                ),
            },
        }
    }
    // One proxy has one mode at a time: a fault on a link would end another's early.
    let network: Vec<(usize, &Fault)> = plan
        .faults
        .iter()
        .enumerate()
        .filter(|(_, f)| f.action.is_network())
        .collect();
    for (n, (i, a)) in network.iter().enumerate() {
        for (j, b) in &network[n + 1..] {
            if a.link == b.link
                && a.at_secs < b.at_secs + b.for_secs
                && b.at_secs < a.at_secs + a.for_secs
            {
                anyhow::bail!(
                    "faults[{i}] and faults[{j}]: two network faults on {} at once (its proxy has one mode at a time)",
                    a.link_name()
                );
            }
        }
    }
    Ok(plan.faults)
}

/// When the plan's last fault has ended, seconds after sending starts.
pub fn last_end_secs(faults: &[Fault]) -> f64 {
    faults
        .iter()
        .map(|f| f.at_secs + f.for_secs)
        .fold(0.0, f64::max)
}

/// A network fault's own settings: a link that exists, and the numbers its mode needs.
fn check_network(f: &Fault) -> anyhow::Result<()> {
    let link = f.link()?;
    if f.server.is_some() || f.share.is_some() || f.slots.is_some() || f.index.is_some() {
        anyhow::bail!("a network fault takes a link, not a server, share, slots or index");
    }
    if f.for_secs <= 0.0 {
        anyhow::bail!("a network fault needs for_secs > 0");
    }
    match f.action {
        Action::Latency => match f.delay_ms {
            Some(d) if (1..=MAX_LATENCY_MS).contains(&d) => {
                if f.jitter_ms.unwrap_or(0) > d {
                    anyhow::bail!("latency: jitter_ms must not exceed delay_ms");
                }
            }
            other => anyhow::bail!("latency needs delay_ms in 1..={MAX_LATENCY_MS}, got {other:?}"),
        },
        Action::Bandwidth => match f.bytes_per_sec {
            Some(b) if b >= 1_000 => {}
            other => anyhow::bail!("bandwidth needs bytes_per_sec >= 1000, got {other:?}"),
        },
        _ => {
            if f.delay_ms.is_some() || f.jitter_ms.is_some() || f.bytes_per_sec.is_some() {
                anyhow::bail!(
                    "{} on {} takes no delay_ms, jitter_ms or bytes_per_sec",
                    f.label(),
                    link.name()
                );
            }
        }
    }
    if !matches!(f.action, Action::Latency) && f.jitter_ms.is_some() {
        anyhow::bail!("jitter_ms is for latency");
    }
    if f.action == Action::Bandwidth && f.delay_ms.is_some() {
        anyhow::bail!("delay_ms is for latency");
    }
    Ok(())
}

/// Runs `ops/stack <verb> <server>`; an error names the command and its output.
pub async fn stack(script: &Path, verb: &str, server: &str) -> anyhow::Result<()> {
    stack_output(script, verb, server).await.map(|_| ())
}

/// As [`stack`], answering what the script printed on stdout (trimmed).
pub async fn stack_output(script: &Path, verb: &str, server: &str) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(script)
        .args([verb, server])
        .output()
        .await
        .map_err(|e| anyhow::anyhow!("cannot run {} {verb} {server}: {e}", script.display()))?;
    if !out.status.success() {
        anyhow::bail!(
            "{} {verb} {server} failed: {}{}",
            script.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_shipped_drill_parses_and_breaks_every_part() {
        let plan = parse(include_str!("../faults/drill.toml")).unwrap();
        let actions: Vec<&Action> = plan.iter().map(|f| &f.action).collect();
        for a in [
            Action::KillConsumer,
            Action::DownstreamFail,
            Action::DownstreamSlow,
            Action::StopServer,
        ] {
            assert!(actions.contains(&&a), "{a:?} missing from the drill");
        }
        assert!(needs_downstream_double(&plan));
    }

    #[test]
    fn the_shipped_chaos_matrix_has_every_host_and_server_death_and_the_network() {
        let plan = parse(include_str!("../faults/chaos.toml")).unwrap();
        let has = |a: Action, server: Option<&str>| {
            plan.iter()
                .any(|f| f.action == a && f.server.as_deref() == server)
        };
        assert!(has(Action::KillService, None));
        assert!(has(Action::KillSdkHost, None));
        assert!(has(Action::StopServer, Some("redis")));
        assert!(has(Action::StopServer, Some("broker")));
        assert!(has(Action::StopBrokers, None));
        assert!(has(Action::DownstreamTimeoutAfterCredit, None));
        assert_eq!(
            links(&plan).into_iter().collect::<Vec<_>>(),
            [Link::SdkRedis, Link::ServiceRedis, Link::ServiceWallet]
        );
        assert_eq!(sdk_hosts(&plan, None).unwrap(), 2);
        assert!(needs_downstream_double(&plan));
    }

    #[test]
    fn killing_an_sdk_host_needs_two_and_a_real_index() {
        let plan =
            parse("[[faults]]\nat_secs = 1\naction = \"kill-sdk-host\"\nindex = 1\n").unwrap();
        assert_eq!(sdk_hosts(&plan, None).unwrap(), 2);
        assert_eq!(sdk_hosts(&plan, Some(3)).unwrap(), 3);
        let e = sdk_hosts(&plan, Some(1)).unwrap_err().to_string();
        assert!(e.contains("needs --sdk-hosts 2"), "{e}");
        let plan =
            parse("[[faults]]\nat_secs = 1\naction = \"kill-sdk-host\"\nindex = 2\n").unwrap();
        let e = sdk_hosts(&plan, None).unwrap_err().to_string();
        assert!(e.contains("past the 2 SDK hosts"), "{e}");
        assert_eq!(sdk_hosts(&[], None).unwrap(), 0);
        assert_eq!(sdk_hosts(&[], Some(2)).unwrap(), 2);
        let e = parse("[[faults]]\nat_secs = 1\naction = \"stop-brokers\"\nserver = \"kafka\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("takes no server"), "{e}");
    }

    #[test]
    fn network_faults_name_a_link_and_the_numbers_their_mode_needs() {
        let ok = parse(concat!(
            "[[faults]]\nat_secs = 1\naction = \"latency\"\nlink = \"service->redis\"\ndelay_ms = 200\njitter_ms = 20\n",
            "[[faults]]\nat_secs = 1\naction = \"blackhole\"\nlink = \"consumer->redis\"\n",
            "[[faults]]\nat_secs = 1\naction = \"drop-answers\"\nlink = \"service->wallet\"\n",
            "[[faults]]\nat_secs = 1\naction = \"reset\"\nlink = \"sdk->redis\"\n",
            "[[faults]]\nat_secs = 10\naction = \"bandwidth\"\nlink = \"service->redis\"\nbytes_per_sec = 20000\n",
        ))
        .unwrap();
        assert_eq!(
            links(&ok).into_iter().collect::<Vec<_>>(),
            [
                Link::SdkRedis,
                Link::ServiceRedis,
                Link::ConsumerRedis,
                Link::ServiceWallet
            ]
        );
        assert!(needs_downstream_double(&ok));
        assert_eq!(
            ok[0].proxy_mode(),
            Some(faultproxy::Mode::Latency {
                delay: std::time::Duration::from_millis(200),
                jitter: std::time::Duration::from_millis(20),
            })
        );
        assert_eq!(
            ok[0].label(),
            "latency service->redis +200 ms ±20 ms for 5 s"
        );
        assert_eq!(ok[2].proxy_mode(), Some(faultproxy::Mode::DropAnswers));
        for (text, want) in [
            (
                "action = \"blackhole\"\nlink = \"consumer->kafka\"",
                "broker links are not offered",
            ),
            ("action = \"blackhole\"\nlink = \"wallet\"", "unknown link"),
            ("action = \"blackhole\"", "unknown link \"\""),
            (
                "action = \"latency\"\nlink = \"sdk->redis\"",
                "latency needs delay_ms",
            ),
            (
                "action = \"latency\"\nlink = \"sdk->redis\"\ndelay_ms = 10\njitter_ms = 20",
                "jitter_ms must not exceed",
            ),
            (
                "action = \"bandwidth\"\nlink = \"sdk->redis\"",
                "bandwidth needs bytes_per_sec",
            ),
            (
                "action = \"reset\"\nlink = \"sdk->redis\"\ndelay_ms = 5",
                "takes no delay_ms",
            ),
            (
                "action = \"reset\"\nlink = \"sdk->redis\"\nserver = \"redis\"",
                "takes a link, not a server",
            ),
            (
                "action = \"reset\"\nlink = \"sdk->redis\"\nfor_secs = 0",
                "for_secs > 0",
            ),
            (
                "action = \"kill-consumer\"\nlink = \"sdk->redis\"",
                "for network faults",
            ),
            (
                "action = \"reset\"\nlink = \"sdk->redis\"\n[[faults]]\nat_secs = 3\naction = \"blackhole\"\nlink = \"sdk->redis\"",
                "two network faults on sdk->redis at once",
            ),
        ] {
            let e = parse(&format!("[[faults]]\nat_secs = 1\n{text}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{text}: {e} should contain {want}");
        }
    }

    #[test]
    fn plans_parse_and_bad_ones_name_the_fault() {
        let ok = parse(
            "[[faults]]\nat_secs = 1\naction = \"kill-consumer\"\n[[faults]]\nat_secs = 2\naction = \"stop-server\"\nserver = \"kafka\"\nfor_secs = 3\n",
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[0].for_secs, 5.0);
        assert_eq!(ok[1].action, Action::StopServer);
        for (text, want) in [
            (
                "[[faults]]\nat_secs = 1\naction = \"stop-server\"\nserver = \"mysql\"\n",
                "faults[0]: stop-server needs server",
            ),
            (
                "[[faults]]\nat_secs = -1\naction = \"kill-consumer\"\n",
                "at_secs",
            ),
            (
                "[[faults]]\nat_secs = 1\naction = \"reboot\"\n",
                "unknown variant",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{e} should contain {want}");
        }
    }
}
