//! A replay's run directory and the configs it writes there.
//!
//! Every replay gets a fresh tag, and everything it touches is named by it: Redis key
//! prefixes (tokens, idempotency records, budgets, ledger, delay queue, dynamic
//! config), topics on both brokers, consumer groups. So a replay never meets an
//! earlier one's data, and its reconciliation can read exactly what it wrote. The run
//! directory keeps the configs, the key ring (mode 0600), the list of what was sent,
//! the manifest that `loadtest reconcile` starts from, the children's logs and the
//! reports.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::profile::Plan;
use reward_stack::env::{QueueSpec, SdkSection, StackEnv};

/// The reward types a replay's services know, with the consumer's rate (credits/s)
/// and priority, and the ledger's capacity: the figures of `ops/consumer.toml` and
/// `ops/reward-service.toml` (after the downstreams in docs/design.md).
pub const TYPES: [(&str, f64, u32, Option<u32>); 3] = [
    ("cash", 300_000.0, 10, None),
    ("coin", 100_000.0, 5, None),
    ("coupon", 2_000.0, 1, Some(2_000)),
];

/// What a reconciliation needs to find a replay's data (`manifest.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// The run's tag.
    pub tag: String,
    /// The profile's name.
    pub profile: String,
    /// Redis holding tokens, records and budgets.
    pub redis_url: String,
    /// Redis of the stand-in wallet's ledger (runs before it had its own: `redis_url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger_redis_url: Option<String>,
    /// Token store key prefix.
    pub token_prefix: String,
    /// Claim store key prefix.
    pub claims_prefix: String,
    /// Budget shards per scene.
    pub claims_shards: u32,
    /// Ledger key prefix.
    pub ledger_prefix: String,
    /// `activity/scene` → budget.
    pub budgets: BTreeMap<String, i64>,
    /// Reward type → the consumer's rate limit, credits/s.
    pub limits: BTreeMap<String, f64>,
    /// Topics: queue name → topic.
    pub topics: BTreeMap<String, String>,
    /// When sending began, Unix ms.
    pub started_unix_ms: i64,
    /// Rewards whose token the SDK could not store (counted, not failed).
    pub token_write_failures: u64,
    /// When `loadtest clean` removed the run's keys (Unix ms); `None` while they stay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleaned_unix_ms: Option<i64>,
}

impl Manifest {
    /// The ledger's Redis.
    pub fn ledger_redis(&self) -> &str {
        self.ledger_redis_url.as_deref().unwrap_or(&self.redis_url)
    }

    /// Reads `manifest.json` from a run directory.
    pub fn load(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join("manifest.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// Writes `manifest.json` (replacing it whole).
    pub fn save(&self, dir: &Path) -> anyhow::Result<()> {
        let tmp = dir.join("manifest.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)?;
        std::fs::rename(&tmp, dir.join("manifest.json"))?;
        Ok(())
    }
}

/// The configs of one replay.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The run directory.
    pub dir: PathBuf,
    /// The manifest (budgets, prefixes, topics).
    pub manifest: Manifest,
    /// The SDK's config text for the load tester itself.
    pub sdk_toml: String,
    /// The run's live mark on its Redis, held while the run's process lives, so
    /// `loadtest clean --leftovers` leaves its keys alone (`reward_tools::clean`).
    pub live: std::sync::Arc<reward_tools::clean::LiveRun>,
}

impl Setup {
    /// The key ring file.
    pub fn keys_file(&self) -> PathBuf {
        self.dir.join("keys")
    }

    /// The file holding the service's grant credential (gRPC, `/metrics`).
    pub fn credential_file(&self) -> PathBuf {
        self.dir.join("credential")
    }

    /// The file holding the service's wallet credential (wallet HTTP routes).
    pub fn wallet_credential_file(&self) -> PathBuf {
        self.dir.join("wallet-credential")
    }
}

fn sdk_section(env: &StackEnv, s: &Manifest, dir: &Path, who: &str) -> String {
    let t = |q: &str| s.topics.get(q).cloned().unwrap_or_default();
    let topics = [t("massive"), t("special"), t("dead"), t("failures")];
    let queue = |i: usize, name, primary, backup| QueueSpec {
        name,
        topic: &topics[i],
        primary,
        backup,
        ratio: 100,
    };
    let queues = [
        queue(0, "massive", "kafka", "rocketmq"),
        queue(1, "special", "rocketmq", "kafka"),
        queue(2, "dead", "kafka", "rocketmq"),
        queue(3, "failures", "kafka", "rocketmq"),
    ];
    SdkSection {
        env,
        keys_file: &dir.join("keys"),
        // Within the service's record retention (retention_secs below).
        ttl_secs: 86_400,
        store_prefix: &s.token_prefix,
        store_timeout_ms: None,
        rocketmq_group: &format!("lt-{who}-{}", s.tag),
        queues: &queues,
        types: &[("cash", None), ("coin", None), ("coupon", Some("special"))],
        spool: &dir.join(format!("spool-{who}")),
    }
    .toml()
}

/// An SDK's own config file (the `[sdk]` section of a service's, unwrapped) for the
/// process `who` (its spool directory and producer group are its own).
fn standalone_sdk_toml(env: &StackEnv, m: &Manifest, dir: &Path, who: &str) -> String {
    sdk_section(env, m, dir, who)
        .replacen("[sdk]\n", "", 1)
        .replace("[sdk.", "[")
}

/// The SDK config of the load tester's own SDK (as [`Setup::sdk_toml`], for another
/// view of the stack: its Redis through a fault proxy).
pub fn local_sdk_toml(env: &StackEnv, setup: &Setup) -> String {
    standalone_sdk_toml(env, &setup.manifest, &setup.dir, "loadtest")
}

/// The `[sdk]` section of a process that embeds an SDK config (the reward agent's),
/// for the process `who` (its spool directory and producer group are its own).
pub fn embedded_sdk_toml(env: &StackEnv, setup: &Setup, who: &str) -> String {
    sdk_section(env, &setup.manifest, &setup.dir, who)
}

/// The SDK config of SDK host `i`.
pub fn host_sdk_toml(env: &StackEnv, setup: &Setup, i: u32) -> String {
    standalone_sdk_toml(env, &setup.manifest, &setup.dir, &format!("host{i}"))
}

/// The sweeper's grace period in a run whose SDK hosts can be killed: long enough
/// for a reward to go through the queues (the end-to-end target is 10 s), short
/// enough that the drain does not wait a minute.
pub const HOST_KILL_GRACE_MS: u64 = 15_000;

/// The reward service's config; with `wallet` (credit URL, status URL), every type
/// credits through that HTTP downstream (the fault drills' downstream double, which
/// honours the idempotency key and answers status) instead of the ledger directly.
/// The ledger is strict (it does not honour the key), so a second effective credit
/// always shows as a double-credit incident.
///
/// `sweeper_grace_ms` is the sweeper's grace period (`[sweeper] grace_ms`).
pub fn service_toml(
    env: &StackEnv,
    setup: &Setup,
    double: Option<(&str, &str)>,
    sweeper_grace_ms: u64,
) -> String {
    let m = &setup.manifest;
    let mut budgets = String::new();
    for (scope, b) in &m.budgets {
        budgets.push_str(&format!("\"{scope}\" = {b}\n"));
    }
    let mut downstreams = String::new();
    for (t, _, _, cap) in TYPES {
        match double {
            Some((url, status)) => downstreams.push_str(&format!(
                "[downstreams.{t}]\nkind = \"http\"\nurl = \"{url}\"\ntimeout_ms = {}\n\
                 honours_idempotency_key = true\nstatus_url = \"{status}\"\n",
                reward_standins::downstream::TIMEOUT_MS
            )),
            None => {
                downstreams.push_str(&format!("[downstreams.{t}]\nkind = \"ledger\"\n"));
                if let Some(c) = cap {
                    downstreams.push_str(&format!("capacity = {c}\n"));
                }
            }
        }
    }
    format!(
        r#"
[server]
grpc_addr = "127.0.0.1:0"
http_addr = "127.0.0.1:0"
max_batch = 1000
shutdown_grace_ms = 10000
[claims]
key_prefix = "{claims}"
shards = {shards}
lease_ms = 30000
retention_secs = 86400
replica_acks = {replica_acks}
[budgets]
{budgets}
{downstreams}
[ledger]
key_prefix = "{ledger}"
redis_url = "{ledger_redis}"
[failures]
archive = "{archive}"
queue = "failures"
[sweeper]
grace_ms = {sweeper_grace_ms}
{sdk}"#,
        claims = m.claims_prefix,
        // On a Redis Cluster every claim waits for its replica before a credit, so a
        // primary killed mid-run cannot forget a claim whose money moved.
        replica_acks = u32::from(m.redis_url.starts_with("redis-cluster://")),
        shards = m.claims_shards,
        ledger = m.ledger_prefix,
        ledger_redis = m.ledger_redis(),
        archive = setup.dir.join("failures.jsonl").display(),
        sdk = sdk_section(env, m, &setup.dir, "service"),
    )
}

/// Which broker a consumer reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broker {
    /// The Kafka group.
    Kafka,
    /// The RocketMQ push consumer group.
    Rocketmq,
}

/// A type's rate when the run sets none: a fleet-wide limit (the consumers lease it
/// from Redis, `reward_consumer::fleet`), above every shipped profile's peak so that
/// only a `--limit` binds.
pub const DEFAULT_TYPE_RATE: f64 = 20_000.0;

/// A consumer's config (`index` numbers it among its broker's members).
pub fn consumer_toml(
    env: &StackEnv,
    setup: &Setup,
    broker: Broker,
    index: u32,
    grpc: &str,
) -> String {
    let m = &setup.manifest;
    let topics = format!(
        "[\"{}\", \"{}\"]",
        m.topics.get("massive").cloned().unwrap_or_default(),
        m.topics.get("special").cloned().unwrap_or_default()
    );
    let source = match broker {
        Broker::Kafka => format!(
            "kind = \"kafka\"\nbrokers = \"{}\"\ngroup = \"g-{}\"\ntopics = {topics}\nsettings = {{ \"session.timeout.ms\" = \"30000\", \"group.instance.id\" = \"ck{index}-{}\" }}",
            env.kafka_brokers, m.tag, m.tag
        ),
        Broker::Rocketmq => format!(
            "kind = \"rocketmq\"\nnamesrv = \"{}\"\ngroup = \"g-{}\"\ntopics = {topics}",
            env.rocketmq_namesrv, m.tag
        ),
    };
    let mut limits = String::new();
    for (t, _, priority, _) in TYPES {
        let rate = m.limits.get(t).copied().unwrap_or(DEFAULT_TYPE_RATE);
        let burst = (rate / 100.0).ceil().max(10.0);
        limits.push_str(&format!(
            "[limits.types.{t}]\nrate = {rate}\nburst = {burst}\npriority = {priority}\n"
        ));
    }
    let who = match broker {
        Broker::Kafka => format!("ck{index}"),
        Broker::Rocketmq => format!("cr{index}"),
    };
    format!(
        r#"
[source]
{source}
[pipeline]
window = 4096
commit_interval_ms = 1000
batch = 200
concurrency = 8
max_retries = 16
backoff_initial_ms = 500
backoff_max_ms = 10000
hold_ms = 1000
limited_delay_ms = 1000
fused_delay_ms = 1000
shutdown_grace_ms = 10000
dead_letter_queue = "dead"
failure_queue = "failures"
[service]
grpc = "{grpc}"
timeout_ms = 10000
[delay]
key_prefix = "ltd-{tag}"
shards = 8
poll_ms = 100
lease_ms = 30000
[fleet]
key_prefix = "ltf-{tag}"
[limits]
global = 0
global_burst = 2000
default_rate = 1000
default_burst = 50
{limits}
[dynamic]
redis_key = "ltcfg-{tag}"
poll_ms = 500
{sdk}"#,
        tag = m.tag,
        sdk = sdk_section(env, m, &setup.dir, &who),
    )
}

/// Creates the run directory, the key ring and both credentials (mode 0600), the topics on
/// both brokers, and the manifest; budgets cover every planned send at its largest
/// amount twice over (a replay checks exactly-once, not budget exhaustion).
pub async fn prepare(
    env: &StackEnv,
    plan: &Plan,
    out: &Path,
    limits: &BTreeMap<String, f64>,
    partitions: i32,
) -> anyhow::Result<Setup> {
    let mut budgets = BTreeMap::new();
    for s in &plan.scenes {
        let mix = crate::profile::Mix::new(&s.scene.types);
        let planned = (s.curve.total() * 2.0).ceil() as i64 + 1000;
        let scope = reward_service::service::scope(&s.scene.activity, s.scene.scene_id());
        *budgets.entry(scope).or_insert(0) += planned.saturating_mul(mix.max_amount());
    }
    prepare_run(env, &plan.name, budgets, out, limits, partitions).await
}

/// [`prepare`] for rewards sent by something other than a profile's plan (the agent's
/// clients): the run is named `name`, and `budgets` (`activity/scene` → budget) are
/// given whole.
pub async fn prepare_run(
    env: &StackEnv,
    name: &str,
    budgets: BTreeMap<String, i64>,
    out: &Path,
    limits: &BTreeMap<String, f64>,
    partitions: i32,
) -> anyhow::Result<Setup> {
    // Marked live before the run writes anything of its own.
    let live =
        reward_tools::clean::LiveRun::start(&[&env.redis_url, &env.wallet_redis_url]).await?;
    let tag = live.tag().to_string();
    let dir = out.join(format!("{name}-{tag}"));
    std::fs::create_dir_all(&dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    write_secret(
        &dir.join("keys"),
        sdk::token::KeyRing::random(1).to_text().as_bytes(),
    )?;
    let secret = || -> String {
        (0..32)
            .map(|_| char::from(b'a' + rand::random::<u8>() % 26))
            .collect()
    };
    write_secret(&dir.join("credential"), secret().as_bytes())?;
    write_secret(&dir.join("wallet-credential"), secret().as_bytes())?;

    let mut all_limits: BTreeMap<String, f64> = TYPES
        .iter()
        .map(|(t, r, _, _)| (t.to_string(), *r))
        .collect();
    for (t, r) in limits {
        if !all_limits.contains_key(t) {
            anyhow::bail!(
                "--limit {t}: unknown reward type (known: {})",
                TYPES.map(|t| t.0).join(", ")
            );
        }
        all_limits.insert(t.clone(), *r);
    }
    let topics: BTreeMap<String, String> = ["massive", "special", "dead", "failures"]
        .iter()
        .map(|q| (q.to_string(), format!("lt-{q}-{tag}")))
        .collect();
    let names: Vec<&str> = topics.values().map(String::as_str).collect();
    reward_stack::topics::create_kafka_topics(&env.kafka_brokers, &names, partitions)
        .await
        .map_err(anyhow::Error::msg)?;
    reward_stack::topics::create_rocketmq_topics(&env.rocketmq_namesrv, &names)
        .await
        .map_err(anyhow::Error::msg)?;
    let manifest = Manifest {
        tag: tag.clone(),
        profile: name.to_string(),
        redis_url: env.redis_url.clone(),
        ledger_redis_url: Some(env.wallet_redis_url.clone()),
        token_prefix: format!("ltt-{tag}"),
        claims_prefix: format!("ltc-{tag}"),
        claims_shards: 16,
        ledger_prefix: format!("ltl-{tag}"),
        budgets,
        limits: all_limits,
        topics,
        started_unix_ms: 0,
        token_write_failures: 0,
        cleaned_unix_ms: None,
    };
    manifest.save(&dir)?;
    let mut setup = Setup {
        dir,
        manifest,
        sdk_toml: String::new(),
        live: std::sync::Arc::new(live),
    };
    setup.sdk_toml = standalone_sdk_toml(env, &setup.manifest, &setup.dir, "loadtest");
    Ok(setup)
}

/// Writes a secret file, readable by its owner only.
pub(crate) fn write_secret(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    f.write_all(bytes)?;
    Ok(())
}
