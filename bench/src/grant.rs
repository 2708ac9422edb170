//! `reward-bench grant`: the reward service's `GrantBatch` against `redis-benchmark`
//! running the bare claim script on the same Redis, in one sitting.
//!
//! # What is compared
//! - **service**: the reward service runs in this process (config `ops/reward-service.toml`
//!   with fresh key prefixes and free ports), `cash` credited by the built-in ledger,
//!   which keeps its balances on the wallet's own Redis (`WALLET_REDIS_URL`): the
//!   wallet is the downstream, and its credits are not the pipeline's Redis work
//!   (`--ledger-on-pipeline-redis` puts them on the pipeline's).
//!   `concurrency` gRPC clients send `GrantBatch` calls of `batch` new trade numbers
//!   each until `grants` are granted, signed as the SDK signs them and with
//!   `require_proof` as a consumer sends them, so every proof is verified. One grant
//!   is four Redis scripts: claim (the idempotency record and the budget), the
//!   ledger's credit, finish (`GRANTED`), and the token move.
//! - **script**: `redis-benchmark` sends `EVALSHA` of the same claim script
//!   ([`reward_service::claim::CLAIM_LUA`]) with a random trade number per call,
//!   `redis_clients` connections, `pipeline` calls per round trip
//!   ([`reward_baseline::claim_script`]). That is the ceiling of one Redis for the one
//!   script a grant cannot do without.
//!
//! The ratio service/script is the headline figure (target ≥ 0.6). Both runs use the
//! same Redis, back to back, so the ratio survives the machine's drift. It does not
//! survive the noise of one run on a shared machine, so `--rounds N` repeats both
//! sides (a fresh service and fresh keys each round) and reports the median ratio and
//! the ratio of the means beside every round's figures.
//!
//! Both sides share the machine's two cores with everything else on it: the service run
//! is bound by the CPU all its processes spend per grant (the pipeline's Redis, the
//! wallet's, this process's client and service), the script run by one Redis core.
//! `docs/findings/benchmarks-history.md` ("Where a reward's CPU goes") has the split.
//!
//! # CPU per grant
//! Each round also prints what the service run cost each process per grant: this
//! process (the gRPC clients, which build and sign the events, and the service), the
//! pipeline's Redis and the wallet's, from `/proc/self/stat` and `INFO cpu` read
//! before and after it (`reward_stack::cpu`); and the pipeline's Redis CPU per call of
//! the script run. A rate on this machine moves with whatever else runs; the CPU a
//! grant costs moves much less, so a change to the service shows there when the
//! ratio cannot tell it from noise.
//!
//! # Checks
//! The run fails instead of reporting a rate unless every grant came back `GRANTED`,
//! the scene's spent budget equals the number of grants (amount 1 each), and the
//! ledger credited every user exactly the grants sent to them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fred::interfaces::ClientLike as _;
use proto::v1::reward_service_client::RewardServiceClient;
use proto::v1::{GrantBatchRequest, GrantOutcome, RewardEvent, UserInfo};
use reward_baseline::parts::start_service;
use reward_baseline::{Percentiles, ScriptLoad, redis_benchmark};
use reward_service::downstream::Ledger;
use reward_stack::env::{Server, StackEnv, check_reachable};

/// What to run.
#[derive(Debug, Clone)]
pub struct GrantBenchOptions {
    /// Grants in the service run.
    pub grants: u64,
    /// Events per `GrantBatch` call.
    pub batch: usize,
    /// Concurrent gRPC callers.
    pub concurrency: usize,
    /// `redis-benchmark` connections.
    pub redis_clients: u32,
    /// `redis-benchmark` calls per round trip.
    pub pipeline: u32,
    /// Users the grants are spread over.
    pub users: u64,
    /// The service's `claims.replica_acks`.
    pub replica_acks: u32,
    /// A Python with the conformance suite's packages: when set, a Python client
    /// (`conformance/bench_grants.py`: 8 channels, batches of 100) grants `grants`
    /// through the same service after the Rust client, in the same sitting.
    pub python: Option<std::path::PathBuf>,
    /// Keep the built-in ledger on the pipeline's Redis instead of the wallet's own:
    /// its credits then share the Redis the claim script's ceiling is measured on.
    pub ledger_on_pipeline_redis: bool,
}

/// The figures.
#[derive(Debug, Clone)]
pub struct GrantBenchReport {
    /// Grants per second through `GrantBatch`.
    pub service_rate: f64,
    /// `GrantBatch` call latency, microseconds.
    pub batch_latency: Percentiles,
    /// `EVALSHA` of the claim script per second (`redis-benchmark`).
    pub script_rate: f64,
    /// `redis-benchmark`'s p99 latency, milliseconds.
    pub script_p99_ms: f64,
    /// The command that ran.
    pub script_command: String,
    /// Times Redis forked (AOF rewrite, RDB save) during the timed runs; `None` when
    /// Redis could not tell ([`reward_stack::env::ForkWatch`]).
    pub redis_forks: Option<u64>,
    /// The Python client's figures (`conformance/bench_grants.py`'s JSON line), when
    /// [`GrantBenchOptions::python`] was set; checked: all granted, spent exact.
    pub python: Option<serde_json::Value>,
    /// CPU per grant of the service run, by process.
    pub service_cpu: GrantCpu,
    /// The pipeline's Redis CPU per `EVALSHA` of the script run, microseconds (`None`
    /// when it was not run or Redis did not answer `INFO`).
    pub script_redis_us: Option<f64>,
}

/// CPU per grant of the service run, microseconds, from counters read before and
/// after it (`reward_stack::cpu`): what each process spent, whatever the machine's
/// speed that sitting. On a busy machine a rate moves with what else runs; the CPU a
/// grant costs moves much less, so a change shows here first.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrantCpu {
    /// This process: the gRPC clients (building and signing the events) and the
    /// service (`/proc/self/stat`, 10 ms ticks).
    pub process_us: Option<f64>,
    /// The pipeline's Redis (claim, finish, token move; the ledger's credits too with
    /// [`GrantBenchOptions::ledger_on_pipeline_redis`]). `None` on a Redis Cluster:
    /// `INFO` asks one node, not every primary.
    pub redis_us: Option<f64>,
    /// The wallet's Redis (the built-in ledger's credits), when it is not the
    /// pipeline's.
    pub wallet_us: Option<f64>,
}

/// CPU counters at one instant: this process (ticks), the pipeline's Redis and the
/// wallet's (seconds; `None` when not read).
struct CpuMark {
    process: Option<u64>,
    redis: Option<f64>,
    wallet: Option<f64>,
}

impl CpuMark {
    /// Reads the counters; `redis` and `wallet` are `None` where not to be read.
    async fn now(
        redis: Option<&fred::prelude::Client>,
        wallet: Option<&fred::prelude::Client>,
    ) -> Self {
        let read = |c: Option<&fred::prelude::Client>| {
            let c = c.cloned();
            async move {
                match c {
                    Some(c) => reward_stack::cpu::redis_cpu(&c).await.ok(),
                    None => None,
                }
            }
        };
        Self {
            process: reward_stack::cpu::proc_ticks(std::process::id()),
            redis: read(redis).await,
            wallet: read(wallet).await,
        }
    }

    /// Microseconds per `n` since `before`.
    fn per(&self, before: &Self, n: u64) -> GrantCpu {
        let n = n.max(1) as f64;
        let secs = |a: Option<f64>, b: Option<f64>| Some((a? - b?) * 1e6 / n);
        GrantCpu {
            process_us: match (self.process, before.process) {
                (Some(a), Some(b)) => {
                    Some(a.saturating_sub(b) as f64 / reward_stack::cpu::USER_HZ * 1e6 / n)
                }
                _ => None,
            },
            redis_us: secs(self.redis, before.redis),
            wallet_us: secs(self.wallet, before.wallet),
        }
    }
}

/// A client of `url` for the CPU counters (`INFO cpu`).
async fn info_client(url: &str) -> anyhow::Result<fred::prelude::Client> {
    use fred::prelude::*;
    let client = Builder::from_config(Config::from_url(url)?).build()?;
    client.init().await?;
    Ok(client)
}

impl GrantBenchReport {
    /// service / script.
    pub fn ratio(&self) -> f64 {
        self.service_rate / self.script_rate
    }
}

fn event(i: u64, users: u64, scene: &str) -> RewardEvent {
    RewardEvent {
        trade_no: format!("gb:{i}"),
        user: Some(UserInfo {
            user_id: (i % users).to_string(),
            ..Default::default()
        }),
        activity_id: "bench".into(),
        scene_id: scene.into(),
        reward_type: "cash".into(),
        amount: 1,
        created_at_ms: reward_runtime::clock::now_ms(),
        ..Default::default()
    }
}

/// Runs both sides; fails on any lost or refused grant.
pub async fn run(env: &StackEnv, opts: &GrantBenchOptions) -> anyhow::Result<GrantBenchReport> {
    let probe = Duration::from_secs(2);
    check_reachable(Server::Redis, &env.redis_host_port()?, probe).await?;
    if !opts.ledger_on_pipeline_redis {
        check_reachable(Server::WalletRedis, &env.wallet_host_port()?, probe).await?;
    }
    check_reachable(Server::Kafka, env.first_kafka_broker(), probe).await?;
    check_reachable(Server::RocketMqNameServer, &env.rocketmq_namesrv, probe).await?;
    let live =
        reward_tools::clean::LiveRun::start(&[&env.redis_url, ledger_url(env, opts)]).await?;
    let tag = live.tag().to_string();
    let report = measure(env, opts, &tag).await;
    // The run's keys go whatever came of it: a failed check would leave every record
    // of the script run behind.
    reward_tools::clean::bench_run(&env.redis_url, &tag).await;
    if ledger_url(env, opts) != env.redis_url {
        reward_tools::clean::bench_run(ledger_url(env, opts), &tag).await;
    }
    live.end().await;
    report
}

/// Where the built-in ledger (the stand-in wallet) keeps its balances: the wallet's
/// own Redis, so that its credits are not the pipeline's Redis work; the pipeline's
/// when [`GrantBenchOptions::ledger_on_pipeline_redis`] asks.
fn ledger_url<'a>(env: &'a StackEnv, opts: &GrantBenchOptions) -> &'a str {
    if opts.ledger_on_pipeline_redis {
        &env.redis_url
    } else {
        &env.wallet_redis_url
    }
}

/// The service run, the Python client's when asked, and the script's ceiling.
async fn measure(
    env: &StackEnv,
    opts: &GrantBenchOptions,
    tag: &str,
) -> anyhow::Result<GrantBenchReport> {
    let tag = tag.to_string();
    let dir = std::env::temp_dir().join(format!("grant-bench-{tag}"));
    let (running, credential) =
        start_service(env, &tag, &dir, opts.replica_acks, ledger_url(env, opts)).await?;
    let scene = "rain";
    let claims = running.service().granter().claims().clone();
    let scope = reward_service::service::scope("bench", scene);
    let budget = i64::try_from(opts.grants)?.saturating_mul(2);
    claims.set_budget(&scope, budget).await?;

    let url = format!("http://{}", running.grpc_addr);
    let batches = opts.grants.div_ceil(opts.batch as u64);
    let forks = reward_stack::env::ForkWatch::start(&env.redis_url).await;
    let next = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    // On a Redis Cluster `INFO` answers for one node: no pipeline figure there.
    let clustered = env.redis_url.starts_with("redis-cluster://");
    let redis = if clustered {
        None
    } else {
        Some(info_client(&env.redis_url).await?)
    };
    let wallet = if ledger_url(env, opts) == env.redis_url {
        None
    } else {
        Some(info_client(ledger_url(env, opts)).await?)
    };
    let sdk = running.service().sdk().clone();
    let cpu_before = CpuMark::now(redis.as_ref(), wallet.as_ref()).await;
    let started = Instant::now();
    let (mut latencies, not_granted) =
        grant_all(&url, &credential, opts, scene, batches, next, &sdk).await?;
    let elapsed = started.elapsed();
    let service_cpu = CpuMark::now(redis.as_ref(), wallet.as_ref())
        .await
        .per(&cpu_before, opts.grants);
    if let Some(w) = wallet {
        let _ = w.quit().await;
    }
    let spent = claims.spent(&scope).await?;
    let python = match &opts.python {
        Some(py) => {
            Some(python_client(py, &running, &claims, &credential, opts.grants, &tag).await?)
        }
        None => None,
    };
    let ledger = Ledger::connect(
        ledger_url(env, opts),
        &format!("gbl-{tag}"),
        &HashMap::new(),
    )
    .await
    .map_err(|e| anyhow::anyhow!("ledger: {e}"))?;
    let sample_user = "0";
    let want_user0 = opts.grants.div_ceil(opts.users);
    let user0 = ledger
        .balance(sample_user, "cash")
        .await
        .map_err(|e| anyhow::anyhow!("ledger: {e}"))?;
    let report = running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    anyhow::ensure!(not_granted == 0, "{not_granted} grants were not GRANTED");
    anyhow::ensure!(
        spent == i64::try_from(opts.grants)?,
        "spent {spent} != {} grants",
        opts.grants
    );
    anyhow::ensure!(
        u64::try_from(user0)? == want_user0,
        "user 0 holds {user0}, sent {want_user0}"
    );
    anyhow::ensure!(report.left == 0, "{} events left at shutdown", report.left);
    let service_rate = opts.grants as f64 / elapsed.as_secs_f64();

    // redis-benchmark drives one node: on a cluster only the service side runs.
    let (script_rate, script_p99_ms, script_command, script_redis_us) = match &redis {
        None => (
            0.0,
            0.0,
            "redis-benchmark drives one node, not a Redis Cluster".to_string(),
            None,
        ),
        Some(redis) => {
            let before = reward_stack::cpu::redis_cpu(redis).await.ok();
            let load = ScriptLoad {
                calls: opts.grants,
                clients: opts.redis_clients,
                pipeline: opts.pipeline,
            };
            let script = redis_benchmark(env, &claims, &tag, &load).await?;
            let after = reward_stack::cpu::redis_cpu(redis).await.ok();
            let _ = redis.quit().await;
            let us = match (before, after) {
                (Some(b), Some(a)) => Some((a - b) * 1e6 / script.calls.max(1) as f64),
                _ => None,
            };
            (script.per_sec, script.p99_ms, script.command, us)
        }
    };
    let redis_forks = forks.since_start().await;
    Ok(GrantBenchReport {
        service_rate,
        batch_latency: Percentiles::of(&mut latencies),
        script_rate,
        script_p99_ms,
        script_command,
        redis_forks,
        python,
        service_cpu,
        script_redis_us,
    })
}

/// Runs `conformance/bench_grants.py` with `python` against the running service, on
/// a scene of its own; checks that every grant was GRANTED and spent exactly once.
async fn python_client(
    python: &std::path::Path,
    running: &reward_service::server::Running,
    claims: &reward_service::claim::Claims,
    credential: &str,
    grants: u64,
    tag: &str,
) -> anyhow::Result<serde_json::Value> {
    let scope = reward_service::service::scope("bench", "py");
    claims
        .set_budget(&scope, i64::try_from(grants)?.saturating_mul(2))
        .await?;
    // The checkout this binary was built from, else the working directory's.
    let script = [
        std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../conformance/bench_grants.py"
        )),
        std::path::PathBuf::from("conformance/bench_grants.py"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .ok_or_else(|| {
        anyhow::anyhow!("conformance/bench_grants.py not found: run from the repository")
    })?;
    let out = tokio::process::Command::new(python)
        .arg(&script)
        .args(["--addr", &running.grpc_addr.to_string()])
        .args([
            "--grants",
            &grants.to_string(),
            "--channels",
            "8",
            "--batch",
            "100",
        ])
        .args(["--scene", "py", "--tag", tag])
        .env("REWARD_SERVICE_TOKEN", credential)
        .output()
        .await
        .map_err(|e| anyhow::anyhow!("{} {}: {e}", python.display(), script.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "the Python client failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let spent = claims.spent(&scope).await?;
    anyhow::ensure!(
        u64::try_from(spent)? == grants,
        "the Python client's scene spent {spent}, not {grants}"
    );
    Ok(v)
}

/// Sends every grant: `opts.concurrency` gRPC clients of the service at `url` take
/// the `batches` batches in turn (the next one to take counted by `next`) and call
/// `GrantBatch` with each; returns each call's latency (µs) and the grants that did
/// not come back `GRANTED`.
async fn grant_all(
    url: &str,
    credential: &str,
    opts: &GrantBenchOptions,
    scene: &'static str,
    batches: u64,
    next: std::sync::Arc<std::sync::atomic::AtomicU64>,
    sdk: &sdk::Sdk,
) -> anyhow::Result<(Vec<u64>, u64)> {
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..opts.concurrency {
        let mut client = RewardServiceClient::connect(url.to_string())
            .await?
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        let next = next.clone();
        let sdk = sdk.clone();
        let auth: tonic::metadata::MetadataValue<_> = format!("Bearer {credential}").parse()?;
        let (grants, batch, users) = (opts.grants, opts.batch as u64, opts.users);
        workers.spawn(async move {
            let mut lat = Vec::new();
            let mut bad = 0u64;
            loop {
                let b = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if b >= batches {
                    break;
                }
                // Signed as the SDK signs, and sent as a consumer sends them: the
                // service verifies every proof.
                let events: Vec<RewardEvent> = (b * batch..((b + 1) * batch).min(grants))
                    .map(|i| {
                        let mut ev = event(i, users, scene);
                        sdk.codec().proofs().sign(&mut ev);
                        ev
                    })
                    .collect();
                let mut req = tonic::Request::new(GrantBatchRequest {
                    events,
                    require_proof: true,
                });
                req.metadata_mut().insert("authorization", auth.clone());
                let t = Instant::now();
                let results = client.grant_batch(req).await?.into_inner().results;
                lat.push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
                bad += results
                    .iter()
                    .filter(|r| r.outcome != GrantOutcome::Granted as i32)
                    .count() as u64;
            }
            Ok::<_, anyhow::Error>((lat, bad))
        });
    }
    let mut latencies = Vec::new();
    let mut not_granted = 0;
    while let Some(joined) = workers.join_next().await {
        let (lat, bad) = joined??;
        latencies.extend(lat);
        not_granted += bad;
    }
    Ok((latencies, not_granted))
}
