//! `loadtest replay`: play a profile's traffic through the real SDK against the local
//! stack, wait until every reward is credited, reconcile, report.
//!
//! # Open-model arrival
//! Each scene has a scheduler that knows when its n-th request is due (the inverse of
//! the arrival curve's integral, [`crate::profile::Curve::time_of`]) and starts it
//! then, as its own task, whether or not earlier requests have returned: a slow call
//! never delays the next one, so latency is measured free of coordinated omission
//! (the approach of wrk2 and of k6's arrival-rate executors). Latency is taken from
//! the request's **intended** start; the lag between intended and actual start (the
//! load tester's own tardiness, e.g. when the machine is saturated) is reported
//! beside it. Requests in flight are capped (`--max-in-flight`, default
//! [`MAX_IN_FLIGHT`]): past it a request is shed and counted, never silently dropped.
//!
//! # A generator that cannot keep up
//! When the machine cannot generate the schedule, latency figures describe the load
//! tester, not the pipeline. The first shed arrival, or a request starting more than
//! [`crate::slo::ABORT_LAG`] late, stops the schedule early (what was sent is still
//! drained, credited and reconciled), and the run is reported **invalid**
//! ([`crate::slo`]), never passed.
//!
//! # From send to credit
//! The ledger keeps each credited trade number's credit time, and `sent.tsv` keeps
//! its send time, so end-to-end latency and the credited rate per second are computed
//! for every reward after the run, not sampled.
//!
//! # Draining
//! After the schedule ends the replay waits for the SDK to hand every event to a
//! broker (spooled ones included), then for the budgets' spent amounts to reach what
//! was sent, then for the ledger to hold every distinct trade number sent (a claim
//! deducts its budget before the downstream credits, so budgets run ahead); no
//! progress for `--drain-secs` ends a wait (reconciliation then reports what is
//! missing). Consumers and the service are stopped gracefully.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::SeedableRng as _;
use sdk::request::{CardCollection, Fireworks, RedEnvelopeRain, RewardRequest, User};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::faults::{Action, Fault};
use crate::profile::{Mix, Plan, SceneKind, Users};
use crate::reconcile::SentReward;
use crate::services::{Child, Spec};
use crate::setup::{self, Broker, Setup};
use reward_runtime::clock::now_ms as unix_ms;
use reward_tools::stack::{Server, StackEnv, check_reachable};

/// Requests in flight above which new arrivals are shed (counted).
pub const MAX_IN_FLIGHT: u64 = 100_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The fitted profile.
    pub plan: Plan,
    /// Where run directories go.
    pub out: PathBuf,
    /// Start the reward service and consumers as children.
    pub with_services: bool,
    /// Kafka consumer group members.
    pub kafka_consumers: u32,
    /// RocketMQ consumer group members.
    pub rocketmq_consumers: u32,
    /// Per-type consumer rate overrides.
    pub limits: BTreeMap<String, f64>,
    /// Faults to inject.
    pub faults: Vec<Fault>,
    /// Give up draining after this long without progress.
    pub drain_secs: u64,
    /// Show a progress bar.
    pub progress: bool,
    /// Partitions per Kafka topic.
    pub partitions: i32,
    /// The `ops/stack` script (fault drills).
    pub stack_script: PathBuf,
    /// After the run, measure the parts' ceilings on the same stack (a bare rdkafka
    /// producer, `redis-benchmark` of the claim script) for the report.
    pub ceilings: bool,
    /// Requests in flight past which arrivals are shed (and the run stops, invalid).
    pub max_in_flight: u64,
    /// This process's metrics recorder (`--metrics-addr`), scraped at the end into
    /// the run directory beside the children's.
    pub metrics: Option<reward_runtime::admin::PrometheusHandle>,
}

/// The parts' ceilings, measured right after the replay on the same stack.
#[derive(Debug, Clone, Serialize)]
pub struct Ceilings {
    /// A bare rdkafka producer sending the SDK's wire bytes, events/s.
    pub raw_producer_per_sec: f64,
    /// The claim script alone by EVALSHA, calls/s.
    pub claim_script_per_sec: f64,
    /// The `redis-benchmark` command line.
    pub claim_script_command: String,
}

/// One second of the run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Second {
    /// Seconds since sending began.
    pub t: u64,
    /// Requests the schedule asked for.
    pub scheduled: u64,
    /// Accepted by the SDK.
    pub sent: u64,
    /// Refused by the SDK (any reason).
    pub refused: u64,
    /// Shed by the load tester (too many in flight).
    pub shed: u64,
    /// Send latency from intended start, µs: p50.
    pub send_p50_us: u64,
    /// … p99.
    pub send_p99_us: u64,
    /// The generator's start lag p99 of this second's arrivals, µs.
    pub start_lag_p99_us: u64,
    /// Rewards sent in this second whose token is not in the store at the end.
    pub tokens_missing: u64,
    /// Credits made in this second, per type (filled after reconciliation).
    pub credited: BTreeMap<String, u64>,
    /// End-to-end p50 of the credits of this second, ms.
    pub e2e_p50_ms: u64,
    /// … p99.
    pub e2e_p99_ms: u64,
    /// SDK counters (cumulative).
    pub sdk_failovers: u64,
    /// Spooled so far.
    pub sdk_spooled: u64,
    /// Delivered to a broker so far.
    pub sdk_delivered: u64,
    /// Consumers' counters (cumulative, summed over members).
    pub consumed: u64,
    /// Requeued because the downstream failed.
    pub requeued_failed: u64,
    /// Requeued because the type was over its rate.
    pub requeued_limited: u64,
    /// Requeued because the type was fused.
    pub requeued_fused: u64,
    /// Limiter waits.
    pub limiter_waits: u64,
    /// Dead-lettered.
    pub dead_lettered: u64,
    /// Delivered to a broker and not yet consumed (an estimate: delivered − consumed).
    pub backlog: u64,
}

/// Latency percentiles, in the unit their field names say.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 99th.
    pub p99: u64,
    /// 99.9th.
    pub p999: u64,
    /// Largest.
    pub max: u64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Self {
        Self {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// Everything a replay measured (the JSON report's body).
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// The profile.
    pub profile: String,
    /// Run tag.
    pub tag: String,
    /// Money, SLOs and validity, with the SLO table ([`crate::slo`]).
    pub verdict: crate::slo::Verdict,
    /// Replay length, seconds (the schedule).
    pub duration_secs: f64,
    /// Users.
    pub users: u64,
    /// Requests the schedule asked for.
    pub scheduled: u64,
    /// Accepted by the SDK (repeats included).
    pub sent: u64,
    /// Of them, deliberate repeats.
    pub repeats: u64,
    /// Refused by the SDK, by reason.
    pub refused: BTreeMap<String, u64>,
    /// Shed by the load tester.
    pub shed: u64,
    /// Send latency from intended start, µs.
    pub send_latency_us: Latency,
    /// The call alone (actual start to return), µs.
    pub call_latency_us: Latency,
    /// Intended → actual start, µs.
    pub start_lag_us: Latency,
    /// Send → credit, ms.
    pub end_to_end_ms: Latency,
    /// Distinct rewards credited.
    pub credited: u64,
    /// Credited rewards per second from the first send to the last credit.
    pub credited_per_sec: f64,
    /// Peak credited in one second.
    pub credited_peak_per_sec: u64,
    /// Sending rate achieved over the schedule, per second.
    pub sent_per_sec: f64,
    /// Seconds from the first send to the last credit.
    pub span_secs: f64,
    /// Consumer rate limit per type, credits/s.
    pub limits: BTreeMap<String, f64>,
    /// Faults injected: (seconds, label).
    pub faults: Vec<(f64, String)>,
    /// The SDK's final counters.
    pub sdk: BTreeMap<String, u64>,
    /// The consumers' final counters (summed).
    pub consumers: BTreeMap<String, u64>,
    /// Per second.
    pub timeline: Vec<Second>,
    /// The PASS/FAIL table.
    pub reconciliation: crate::reconcile::Reconciliation,
    /// The parts' ceilings (with `--ceilings`).
    pub ceilings: Option<Ceilings>,
    /// The stand-in wallet's counters (runs with a downstream fault): calls, failed
    /// on purpose, answered late after crediting, repeats answered with the first
    /// receipt.
    pub wallet: BTreeMap<String, u64>,
}

struct Sample {
    second: u64,
    intended_us: u64,
    start_us: u64,
    end_us: u64,
    outcome: Result<(SentReward, bool), &'static str>,
}

fn refusal(e: &sdk::SendError) -> &'static str {
    match e {
        sdk::SendError::Invalid(_) => "invalid",
        sdk::SendError::Backpressure(_) => "backpressure",
        sdk::SendError::Closed => "closed",
        sdk::SendError::TooManyTokens { .. } => "too_many_tokens",
        sdk::SendError::Store(_) => "store",
        sdk::SendError::Seal(_) => "seal",
    }
}

/// Builds one scene's requests: user draw (respecting the per-user cap), type and
/// amount, the scene helper's trade number with the user's own win counter as round.
struct SceneGen {
    kind: SceneKind,
    activity: String,
    users: Users,
    mix: Mix,
    wins: Vec<u32>,
    cap: u32,
    recent: Vec<RewardRequest>,
}

impl SceneGen {
    fn next<R: rand::Rng>(
        &mut self,
        rng: &mut R,
        repeat_share: f64,
    ) -> Option<(RewardRequest, bool)> {
        if !self.recent.is_empty() && rng.random_bool(repeat_share) {
            let i = rng.random_range(0..self.recent.len());
            return Some((self.recent[i].clone(), true));
        }
        let mut rank = None;
        for _ in 0..16 {
            let r = self.users.draw(rng);
            if self.wins[r as usize] < self.cap {
                rank = Some(r);
                break;
            }
        }
        let rank = rank?;
        self.wins[rank as usize] += 1;
        let round = u64::from(self.wins[rank as usize]);
        let user = User {
            user_id: rank.to_string(),
            device_id: String::new(),
            app_id: String::new(),
        };
        let (ty, amount) = self.mix.draw(rng);
        let req = match self.kind {
            SceneKind::Rain => RedEnvelopeRain::new(&self.activity, ty).grab(&user, round, amount),
            SceneKind::Cards => {
                let mut r = CardCollection::new(&self.activity, ty).draw(&user, round, "c1");
                r.amount = amount;
                r
            }
            SceneKind::Fireworks => Fireworks::new(&self.activity, ty, 0, 1).win(
                &user,
                i64::try_from(round).unwrap_or(i64::MAX),
                amount,
            ),
        };
        if self.recent.len() < 4096 {
            self.recent.push(req.clone());
        } else {
            let i = rng.random_range(0..self.recent.len());
            self.recent[i] = req.clone();
        }
        Some((req, false))
    }
}

/// The schedule's counters, shared by every scene.
#[derive(Debug, Default)]
struct Counters {
    /// `send_reward` calls not yet returned.
    in_flight: AtomicU64,
    /// Arrivals due so far.
    scheduled: AtomicU64,
    /// Arrivals shed (too many in flight).
    shed: AtomicU64,
    /// Arrivals dropped because every user drawn was at the scene's cap.
    capped: AtomicU64,
    /// Sends the SDK refused (the progress bar's live error count).
    refused: AtomicU64,
    /// A request started more than [`crate::slo::ABORT_LAG`] late: the schedule stops.
    aborted: std::sync::atomic::AtomicBool,
    /// Requests in flight past which arrivals are shed (set once, at start).
    max_in_flight: u64,
}

/// Runs the schedule of one scene until its curve ends.
async fn schedule(
    sdk: Arc<sdk::Sdk>,
    mut generator: SceneGen,
    curve: crate::profile::Curve,
    repeat_share: f64,
    start: Instant,
    samples: mpsc::UnboundedSender<Sample>,
    counters: Arc<Counters>,
) {
    let Counters {
        in_flight,
        scheduled,
        shed,
        capped,
        ..
    } = &*counters;
    let mut rng = rand::rngs::StdRng::from_os_rng();
    let mut n: u64 = 0;
    while let Some(t) = curve.time_of((n + 1) as f64) {
        if counters.aborted.load(Ordering::Relaxed) {
            break;
        }
        n += 1;
        let due = start + Duration::from_secs_f64(t);
        let now = Instant::now();
        if due > now {
            tokio::time::sleep_until(due.into()).await;
        }
        scheduled.fetch_add(1, Ordering::Relaxed);
        let intended_us = (due - start).as_micros() as u64;
        if in_flight.load(Ordering::Relaxed) >= counters.max_in_flight {
            // The generator cannot keep up: the run is invalid; stop it.
            shed.fetch_add(1, Ordering::Relaxed);
            counters.aborted.store(true, Ordering::Relaxed);
            break;
        }
        let Some((req, repeat)) = generator.next(&mut rng, repeat_share) else {
            capped.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        in_flight.fetch_add(1, Ordering::Relaxed);
        let sdk = sdk.clone();
        let samples = samples.clone();
        let counters = counters.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            if started.saturating_duration_since(due) > crate::slo::ABORT_LAG {
                counters.aborted.store(true, Ordering::Relaxed);
            }
            let sent_unix_ms = unix_ms();
            let r = sdk.send_reward(req.clone()).await;
            let end = Instant::now();
            counters.in_flight.fetch_sub(1, Ordering::Relaxed);
            let outcome = match r {
                Ok(_) => Ok((
                    SentReward {
                        trade_no: req.trade_no,
                        user_id: req.user.user_id,
                        activity_id: req.activity_id,
                        scene_id: req.scene_id,
                        reward_type: req.reward_type,
                        amount: req.amount,
                        sent_unix_ms,
                        // Every accepted reward's token is expected in the store,
                        // whatever the call answered (a failed write is retried);
                        // reconcile counts the missing ones, the SLO judges their share.
                        stored: true,
                    },
                    repeat,
                )),
                Err(e) => {
                    counters.refused.fetch_add(1, Ordering::Relaxed);
                    Err(refusal(&e))
                }
            };
            let _ = samples.send(Sample {
                second: intended_us / 1_000_000,
                intended_us,
                start_us: (started - start).as_micros() as u64,
                end_us: (end - start).as_micros() as u64,
                outcome,
            });
        });
    }
}

// 1 µs .. 10 min, 3 significant digits: constant bounds that cannot be refused.
#[allow(clippy::expect_used)]
fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("constant histogram bounds")
}

#[derive(Default)]
struct Collected {
    send: Option<Histogram<u64>>,
    call: Option<Histogram<u64>>,
    lag: Option<Histogram<u64>>,
    /// Per second: accepted, refused, send latency, start lag.
    per_second: Vec<(u64, u64, Histogram<u64>, Histogram<u64>)>,
    refused: BTreeMap<String, u64>,
    sent: u64,
    repeats: u64,
    sent_amount_by_scope: BTreeMap<String, i64>,
}

/// Consumers' counters, read from their stats files (summed over members and
/// restarts: each start writes its own file).
fn consumer_counters(dir: &std::path::Path) -> BTreeMap<String, u64> {
    let mut sum = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return sum;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.ends_with(".stats.json") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        if let Some(stats) = v.get("stats").and_then(|s| s.as_object()) {
            for (k, v) in stats {
                *sum.entry(k.clone()).or_default() += v.as_u64().unwrap_or(0);
            }
        }
    }
    sum
}

/// The `/metrics` URL in a child's ready line (`... metrics on http://A/metrics`, or
/// the service's `... HTTP on A`).
fn metrics_url(ready: &str) -> String {
    if let Some((_, url)) = ready.split_once("metrics on ") {
        return url.trim().to_string();
    }
    match ready.split_once("HTTP on ") {
        Some((_, addr)) => format!("http://{}/metrics", addr.trim()),
        None => String::new(),
    }
}

/// GET of a loopback `http://host:port/path` URL (HTTP/1.0, body returned on 200),
/// with a bearer credential when one is given (the reward service's `/metrics`).
pub async fn scrape(url: &str, bearer: Option<&str>) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("not an http:// URL: {url:?}"))?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut conn =
        tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(host))
            .await
            .map_err(|_| anyhow::anyhow!("connect to {host} timed out"))??;
    let auth = bearer.map_or(String::new(), |b| format!("Authorization: Bearer {b}\r\n"));
    conn.write_all(format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n{auth}\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut buf))
        .await
        .map_err(|_| anyhow::anyhow!("reading {url} timed out"))??;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("{url}: not an HTTP answer"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        anyhow::bail!("{url}: {}", head.lines().next().unwrap_or_default());
    }
    Ok(body.to_string())
}

/// Waits until every Kafka member's stats file says it holds partitions: a member
/// reports itself started before the group has assigned it anything (with tansu and
/// static membership that takes about 5 s), and rewards sent meanwhile would wait
/// in the topic and show up as end-to-end latency that is only start-up.
async fn wait_assigned(dir: &std::path::Path, members: u32) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut ready = 0;
        for i in 0..members {
            let path = dir.join(format!("consumer-kafka-{i}-1.stats.json"));
            let assigned = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|v| v.get("assigned").and_then(serde_json::Value::as_u64))
                .unwrap_or(0);
            if assigned > 0 {
                ready += 1;
            }
        }
        if ready == members {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "only {ready} of {members} Kafka consumers were assigned partitions within 90 s (see their logs in {})",
                dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

struct Services {
    service: Option<Child>,
    consumers: Vec<Child>,
}

fn consumer_spec(
    setup: &Setup,
    env: &StackEnv,
    broker: Broker,
    index: u32,
    grpc: &str,
    start: u32,
) -> anyhow::Result<Spec> {
    let name = match broker {
        Broker::Kafka => format!("consumer-kafka-{index}"),
        Broker::Rocketmq => format!("consumer-rocketmq-{index}"),
    };
    let config = setup.dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        setup::consumer_toml(env, setup, broker, index, grpc),
    )?;
    Ok(Spec {
        name: name.clone(),
        program: crate::services::bin_dir().join("reward-consumer"),
        args: vec![
            "--config".into(),
            config.display().to_string(),
            "--stats-file".into(),
            setup
                .dir
                .join(format!("{name}-{start}.stats.json"))
                .display()
                .to_string(),
            "--progress-secs".into(),
            "5".into(),
            "--metrics-addr".into(),
            "127.0.0.1:0".into(),
        ],
        env: vec![(
            "REWARD_SERVICE_TOKEN_FILE".into(),
            setup.credential_file().display().to_string(),
        )],
        log: setup.dir.join(format!("{name}.log")),
        // Printed once the consumer has started and serves its metrics.
        ready_line: "reward-consumer: metrics on ".into(),
    })
}

async fn start_services(
    env: &StackEnv,
    setup: &Setup,
    opts: &ReplayOptions,
    wallet: Option<&crate::wallet::Wallet>,
) -> anyhow::Result<(Services, String)> {
    let config = setup.dir.join("service.toml");
    let urls = wallet.map(|w| (w.url(), w.status_url()));
    std::fs::write(
        &config,
        setup::service_toml(
            env,
            setup,
            urls.as_ref().map(|(u, s)| (u.as_str(), s.as_str())),
        ),
    )?;
    let spec = Spec {
        name: "service".into(),
        program: crate::services::bin_dir().join("reward-service"),
        args: vec!["--config".into(), config.display().to_string()],
        env: vec![
            (
                "REWARD_SERVICE_TOKEN_FILE".into(),
                setup.credential_file().display().to_string(),
            ),
            (
                "REWARD_WALLET_TOKEN_FILE".into(),
                setup.wallet_credential_file().display().to_string(),
            ),
        ],
        log: setup.dir.join("service.log"),
        ready_line: "reward-service: gRPC on ".into(),
    };
    let service = Child::start(spec, Duration::from_secs(60)).await?;
    let grpc = service
        .ready
        .trim_start_matches("reward-service: gRPC on ")
        .split(',')
        .next()
        .unwrap_or_default()
        .to_string();
    let grpc = format!("http://{grpc}");
    let mut consumers = Vec::new();
    for (broker, n) in [
        (Broker::Kafka, opts.kafka_consumers),
        (Broker::Rocketmq, opts.rocketmq_consumers),
    ] {
        for i in 0..n {
            let spec = consumer_spec(setup, env, broker, i, &grpc, 1)?;
            consumers.push(Child::start(spec, Duration::from_secs(90)).await?);
        }
    }
    Ok((
        Services {
            service: Some(service),
            consumers,
        },
        grpc,
    ))
}

/// Runs one replay; returns its run directory and report (reconciliation included).
pub async fn run(env: &StackEnv, opts: &ReplayOptions) -> anyhow::Result<(PathBuf, ReplayReport)> {
    let probe = Duration::from_secs(2);
    check_reachable(Server::Redis, &env.redis_host_port()?, probe).await?;
    check_reachable(Server::Kafka, crate::smoke::kafka::first_broker(env), probe).await?;
    check_reachable(Server::RocketMqNameServer, &env.rocketmq_namesrv, probe).await?;
    let mut setup =
        setup::prepare(env, &opts.plan, &opts.out, &opts.limits, opts.partitions).await?;
    let dir = setup.dir.clone();
    eprintln!("replay: run directory {}", dir.display());

    let wallet = if crate::faults::needs_wallet(&opts.faults) {
        let ledger = reward_service::downstream::Ledger::connect(
            &env.redis_url,
            &setup.manifest.ledger_prefix,
            &std::collections::HashMap::new(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("ledger: {e}"))?;
        Some(crate::wallet::Wallet::start(ledger).await?)
    } else {
        None
    };
    let (services, grpc) = if opts.with_services {
        let (s, g) = start_services(env, &setup, opts, wallet.as_ref()).await?;
        (s, Some(g))
    } else {
        (
            Services {
                service: None,
                consumers: Vec::new(),
            },
            None,
        )
    };
    if opts.with_services {
        wait_assigned(&dir, opts.kafka_consumers).await?;
    }
    let services = Arc::new(tokio::sync::Mutex::new(services));

    let cfg = sdk::config::SdkConfig::from_toml_str(&setup.sdk_toml)?;
    let sdk = Arc::new(sdk::Sdk::builder(cfg).start().await?);

    let start = Instant::now();
    setup.manifest.started_unix_ms = unix_ms();
    setup.manifest.save(&dir)?;

    // Samples → histograms, per-second buckets and sent.tsv.
    let (tx, mut rx) = mpsc::unbounded_channel::<Sample>();
    let sent_path = dir.join("sent.tsv");
    let collector = tokio::spawn(async move {
        use std::io::Write as _;
        let file = std::fs::File::create(&sent_path)?;
        let mut out = std::io::BufWriter::new(file);
        let mut c = Collected {
            send: Some(hist()),
            call: Some(hist()),
            lag: Some(hist()),
            ..Collected::default()
        };
        while let Some(s) = rx.recv().await {
            let idx = s.second as usize;
            while c.per_second.len() <= idx {
                c.per_second.push((0, 0, hist(), hist()));
            }
            match s.outcome {
                Ok((r, repeat)) => {
                    writeln!(out, "{}", r.line(repeat))?;
                    c.sent += 1;
                    if repeat {
                        c.repeats += 1;
                    } else {
                        *c.sent_amount_by_scope
                            .entry(reward_service::service::scope(&r.activity_id, &r.scene_id))
                            .or_default() += r.amount;
                    }
                    c.per_second[idx].0 += 1;
                }
                Err(kind) => {
                    *c.refused.entry(kind.to_string()).or_default() += 1;
                    c.per_second[idx].1 += 1;
                }
            }
            let total = s.end_us.saturating_sub(s.intended_us).max(1);
            let _ = c.per_second[idx].2.record(total);
            if let Some(h) = c.send.as_mut() {
                let _ = h.record(total);
            }
            if let Some(h) = c.call.as_mut() {
                let _ = h.record(s.end_us.saturating_sub(s.start_us).max(1));
            }
            let lag = s.start_us.saturating_sub(s.intended_us).max(1);
            let _ = c.per_second[idx].3.record(lag);
            if let Some(h) = c.lag.as_mut() {
                let _ = h.record(lag);
            }
        }
        out.flush()?;
        anyhow::Ok(c)
    });

    // Per-second sampler of the SDK's and consumers' counters.
    let stop = Arc::new(tokio::sync::Notify::new());
    let sampler = {
        let sdk = sdk.clone();
        let dir = dir.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut rows: Vec<(BTreeMap<String, u64>, sdk::queue::StatsSnapshot)> = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = stop.notified() => break,
                }
                rows.push((consumer_counters(&dir), sdk.stats()));
            }
            rows
        })
    };

    // Faults.
    let fault_log = Arc::new(std::sync::Mutex::new(Vec::<(f64, String)>::new()));
    let faults = {
        let faults = opts.faults.clone();
        let services = services.clone();
        let log = fault_log.clone();
        let script = opts.stack_script.clone();
        let setup = setup.clone();
        let env = env.clone();
        let grpc = grpc.clone();
        let wallet = wallet.clone();
        tokio::spawn(async move {
            let mut handles = Vec::new();
            for f in faults {
                let services = services.clone();
                let log = log.clone();
                let script = script.clone();
                let setup = setup.clone();
                let env = env.clone();
                let grpc = grpc.clone();
                let wallet = wallet.clone();
                handles.push(tokio::spawn(async move {
                    tokio::time::sleep_until((start + Duration::from_secs_f64(f.at_secs)).into())
                        .await;
                    let r = inject(
                        &f,
                        &services,
                        &script,
                        &setup,
                        &env,
                        grpc.as_deref(),
                        wallet.as_ref(),
                    )
                    .await;
                    let label = match &r {
                        Ok(()) => f.label(),
                        Err(e) => format!("{} FAILED: {e}", f.label()),
                    };
                    eprintln!(
                        "replay: fault at {:.1} s: {label}",
                        start.elapsed().as_secs_f64()
                    );
                    if let Ok(mut l) = log.lock() {
                        l.push((f.at_secs, label));
                    }
                }));
            }
            for h in handles {
                let _ = h.await;
            }
        })
    };

    // The schedule.
    let counters = Arc::new(Counters {
        max_in_flight: opts.max_in_flight,
        ..Counters::default()
    });
    let expected = opts.plan.expected_sends();
    let bar = progress_bar(opts.progress, expected as u64, "sending");
    let mut scenes = Vec::new();
    for s in &opts.plan.scenes {
        let users = opts.plan.users;
        let generator = SceneGen {
            kind: s.scene.kind,
            activity: s.scene.activity.clone(),
            users: Users::new(users, opts.plan.zipf_exponent),
            mix: Mix::new(&s.scene.types),
            wins: vec![0; usize::try_from(users + 1).unwrap_or(usize::MAX)],
            cap: s.scene.max_per_user.unwrap_or(u32::MAX),
            recent: Vec::new(),
        };
        scenes.push(tokio::spawn(schedule(
            sdk.clone(),
            generator,
            s.curve.clone(),
            opts.plan.duplicate_share,
            start,
            tx.clone(),
            counters.clone(),
        )));
    }
    drop(tx);
    let mut all = futures_util::future::join_all(scenes);
    loop {
        tokio::select! {
            r = &mut all => { for x in r { x?; } break; }
            () = tokio::time::sleep(Duration::from_millis(250)) => {
                bar.set_position(counters.scheduled.load(Ordering::Relaxed));
                bar.set_message(format!(
                    "{} in flight, {} refused, {} shed",
                    counters.in_flight.load(Ordering::Relaxed),
                    counters.refused.load(Ordering::Relaxed),
                    counters.shed.load(Ordering::Relaxed)
                ));
            }
        }
    }
    bar.finish();
    let collected = collector.await??;
    let send_end = start.elapsed();
    if counters.aborted.load(Ordering::Relaxed) {
        eprintln!(
            "replay: the load tester could not keep to the schedule (an arrival shed, or one started over {} s late); stopped early, the run is INVALID",
            crate::slo::ABORT_LAG.as_secs()
        );
    }
    eprintln!(
        "replay: schedule done in {:.1} s: {} sent, {} refused, {} shed, {} capped draws",
        send_end.as_secs_f64(),
        collected.sent,
        collected.refused.values().sum::<u64>(),
        counters.shed.load(Ordering::Relaxed),
        counters.capped.load(Ordering::Relaxed)
    );

    // Drain: events onto a broker, then credits.
    let drain = Duration::from_secs(opts.drain_secs);
    let mut last = (0, 0);
    let mut moved = Instant::now();
    loop {
        let s = sdk.stats();
        if s.unsettled == 0 && s.spooled <= s.replayed {
            break;
        }
        if (s.delivered, s.replayed) != last {
            last = (s.delivered, s.replayed);
            moved = Instant::now();
        }
        if moved.elapsed() > drain {
            eprintln!(
                "replay: SDK still holds {} events, {} spooled not replayed; giving up the wait",
                s.unsettled,
                s.spooled - s.replayed
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let claims = reward_service::claim::Claims::connect(
        &env.redis_url,
        reward_service::claim::ClaimConfig {
            key_prefix: setup.manifest.claims_prefix.clone(),
            shards: setup.manifest.claims_shards,
            ..reward_service::claim::ClaimConfig::default()
        },
    )
    .await?;
    let want: i64 = collected.sent_amount_by_scope.values().sum();
    let bar = progress_bar(
        opts.progress,
        u64::try_from(want).unwrap_or(0),
        "crediting (amount)",
    );
    let mut last_spent = -1;
    let mut moved = Instant::now();
    loop {
        let mut spent = 0;
        for scope in collected.sent_amount_by_scope.keys() {
            spent += claims.spent(scope).await.unwrap_or(0);
        }
        bar.set_position(u64::try_from(spent).unwrap_or(0));
        if spent >= want {
            break;
        }
        if spent != last_spent {
            last_spent = spent;
            moved = Instant::now();
        }
        if moved.elapsed() > drain {
            eprintln!(
                "replay: credits stalled at {spent} of {want} for {} s; reconciling what is there",
                drain.as_secs()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bar.finish();
    // A claim deducts the budget before the downstream call, so budgets can reach
    // the sent amount while the last credits are still on their way (and a retry
    // parked in the delay queue can sit behind them): wait until the ledger itself
    // holds every distinct trade number sent, reading it as reconciliation does.
    let mut last_credited = u64::MAX;
    let mut moved = Instant::now();
    loop {
        let r = crate::reconcile::run(&dir).await?;
        if r.credited >= r.sent {
            break;
        }
        if r.credited != last_credited {
            last_credited = r.credited;
            moved = Instant::now();
        }
        if moved.elapsed() > drain {
            eprintln!(
                "replay: the ledger holds {} of {} trade numbers, no progress for {} s; reconciling what is there",
                r.credited,
                r.sent,
                drain.as_secs()
            );
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let _ = faults.await;

    stop.notify_one();
    let samples = sampler.await.unwrap_or_default();
    let consumers_final = {
        let mut s = services.lock().await;
        // Each process's final metrics, before it stops (operators read them; the
        // tests check the counters against what was sent).
        let mut scrapes: Vec<(String, String, Option<String>)> = s
            .consumers
            .iter()
            .map(|c| (c.spec.name.clone(), metrics_url(&c.ready), None))
            .collect();
        if let Some(svc) = &s.service {
            // The service's /metrics takes its grant credential.
            let credential = std::fs::read_to_string(setup.credential_file())
                .map(|t| t.trim().to_string())
                .ok();
            scrapes.push(("service".into(), metrics_url(&svc.ready), credential));
        }
        for (name, url, bearer) in scrapes {
            match scrape(&url, bearer.as_deref()).await {
                Ok(text) => std::fs::write(dir.join(format!("metrics-{name}.prom")), text)?,
                Err(e) => eprintln!("replay: cannot scrape {name} at {url}: {e}"),
            }
        }
        if let Some(h) = &opts.metrics {
            std::fs::write(dir.join("metrics-loadtest.prom"), h.render())?;
        }
        for c in s.consumers.drain(..) {
            let name = c.spec.name.clone();
            if c.stop(Duration::from_secs(30)).await != Some(0) {
                eprintln!("replay: {name} did not stop cleanly (see its log)");
            }
        }
        if let Some(svc) = s.service.take()
            && svc.stop(Duration::from_secs(30)).await != Some(0)
        {
            eprintln!("replay: the reward service did not stop cleanly (see service.log)");
        }
        consumer_counters(&dir)
    };
    let close = sdk.close(Duration::from_secs(30)).await;
    // Writes still unanswered at close are as unstored as those given up.
    setup.manifest.token_write_failures = sdk.token_write_failures() + close.tokens_left;
    setup.manifest.save(&dir)?;

    let reconciliation = crate::reconcile::run(&dir).await?;
    let ceilings = if opts.ceilings {
        let n = reconciliation.sent.clamp(20_000, 200_000);
        eprintln!("replay: measuring the parts' ceilings ({n} events each)");
        let raw = crate::bench::raw_ceiling(env, n, opts.partitions).await?;
        let (script, command) = crate::grant_bench::script_ceiling(env, n).await?;
        Some(Ceilings {
            raw_producer_per_sec: raw,
            claim_script_per_sec: script,
            claim_script_command: command,
        })
    } else {
        None
    };
    let mut report = build_report(
        &opts.plan,
        &setup,
        &collected,
        counters.scheduled.load(Ordering::Relaxed),
        counters.shed.load(Ordering::Relaxed),
        &samples,
        sdk_counters(&sdk, &close),
        counters.aborted.load(Ordering::Relaxed),
        consumers_final,
        fault_log
            .lock()
            .map(|l| {
                let mut l = l.clone();
                l.sort_by(|a, b| a.0.total_cmp(&b.0));
                l
            })
            .unwrap_or_default(),
        reconciliation,
    );
    report.ceilings = ceilings;
    if let Some(w) = &wallet {
        let (calls, failed) = w.counts();
        let (late, repeats) = w.late_and_repeats();
        report.wallet = BTreeMap::from([
            ("calls".to_string(), calls),
            ("failed".to_string(), failed),
            ("late".to_string(), late),
            ("repeats".to_string(), repeats),
        ]);
    }
    Ok((dir, report))
}

async fn inject(
    f: &Fault,
    services: &tokio::sync::Mutex<Services>,
    script: &std::path::Path,
    setup: &Setup,
    env: &StackEnv,
    grpc: Option<&str>,
    wallet: Option<&crate::wallet::Wallet>,
) -> anyhow::Result<()> {
    let down = Duration::from_secs_f64(f.for_secs);
    match f.action {
        Action::DownstreamFail | Action::DownstreamSlow | Action::DownstreamTimeoutAfterCredit => {
            let Some(w) = wallet else {
                anyhow::bail!("no stand-in wallet running");
            };
            match f.action {
                Action::DownstreamFail => w.set_fail_share(f.share.unwrap_or(0.0)),
                Action::DownstreamSlow => {
                    w.set_delay(Duration::from_millis(f.delay_ms.unwrap_or(0)));
                }
                _ => w.set_late_share(f.share.unwrap_or(1.0)),
            }
            tokio::time::sleep(down).await;
            match f.action {
                Action::DownstreamFail => w.set_fail_share(0.0),
                Action::DownstreamSlow => w.set_delay(Duration::ZERO),
                _ => w.set_late_share(0.0),
            }
            Ok(())
        }
        Action::RedisPause => {
            // One connection of its own: the pausing client is not paused.
            let client = fred::prelude::Builder::from_config(fred::prelude::Config::from_url(
                &env.redis_url,
            )?)
            .build()?;
            fred::interfaces::ClientLike::init(&client).await?;
            let ms = down.as_millis().to_string();
            let _: String = fred::interfaces::ClientLike::custom(
                &client,
                fred::types::CustomCommand::new_static(
                    "CLIENT",
                    fred::types::ClusterHash::FirstKey,
                    false,
                ),
                vec!["PAUSE", ms.as_str(), "ALL"],
            )
            .await?;
            tokio::time::sleep(down).await;
            let _ = fred::interfaces::ClientLike::quit(&client).await;
            Ok(())
        }
        Action::StopServer => {
            let server = f.server.as_deref().unwrap_or("kafka");
            crate::faults::stack(script, "stop", server).await?;
            tokio::time::sleep(down).await;
            crate::faults::stack(script, "start", server).await
        }
        Action::KillConsumer => {
            let Some(grpc) = grpc else {
                anyhow::bail!("kill-consumer needs --with-services");
            };
            let want = f.index.unwrap_or(0);
            let mut victim = {
                let mut s = services.lock().await;
                let name = format!("consumer-kafka-{want}");
                let Some(i) = s.consumers.iter().position(|c| c.spec.name == name) else {
                    anyhow::bail!("no {name} running");
                };
                s.consumers.remove(i)
            };
            victim.kill_hard().await;
            tokio::time::sleep(down).await;
            let spec = consumer_spec(setup, env, Broker::Kafka, want, grpc, victim.starts + 1)?;
            let restarted = Child::start(spec, Duration::from_secs(90)).await;
            let mut restarted = restarted?;
            restarted.starts = victim.starts + 1;
            services.lock().await.consumers.push(restarted);
            Ok(())
        }
    }
}

fn progress_bar(on: bool, len: u64, what: &str) -> indicatif::ProgressBar {
    if !on {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{prefix:>20} [{elapsed_precise}] {wide_bar} {pos}/{len} {per_sec} {msg}",
    ) {
        bar.set_style(style);
    }
    bar.set_prefix(what.to_string());
    bar
}

/// The SDK's final counters, named as the report's SDK table shows them.
fn sdk_counters(sdk: &sdk::Sdk, close: &sdk::queue::CloseReport) -> BTreeMap<String, u64> {
    let q = &close.stats;
    let st = sdk.store().stats();
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    [
        ("events accepted", q.accepted),
        ("events delivered", q.delivered),
        ("events failed over", q.failovers),
        ("event send retries", q.retries),
        ("events spooled", q.spooled),
        ("events replayed from spool", q.replayed),
        ("events only logged", q.logged),
        ("events unsettled at close", q.unsettled),
        ("tokens written", n(&st.written)),
        ("token write attempts failed", n(&st.failed)),
        ("token write retries", n(&st.retried)),
        ("tokens given up", n(&st.unstored)),
        ("tokens left at close", close.tokens_left),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[allow(clippy::too_many_arguments)]
fn build_report(
    plan: &Plan,
    setup: &Setup,
    c: &Collected,
    scheduled: u64,
    shed: u64,
    samples: &[(BTreeMap<String, u64>, sdk::queue::StatsSnapshot)],
    sdk_map: BTreeMap<String, u64>,
    aborted: bool,
    consumers: BTreeMap<String, u64>,
    faults: Vec<(f64, String)>,
    reconciliation: crate::reconcile::Reconciliation,
) -> ReplayReport {
    let started = setup.manifest.started_unix_ms;
    // Credits per second and end-to-end latency from the ledger's credit times.
    let mut e2e = hist();
    let mut per_sec_e2e: Vec<Histogram<u64>> = Vec::new();
    let mut credited: Vec<BTreeMap<String, u64>> = Vec::new();
    let mut last_credit = started;
    for (at, delay, ty) in &reconciliation.credit_delays_ms {
        let d = u64::try_from(*delay).unwrap_or(0).max(1);
        let _ = e2e.record(d);
        let sec = usize::try_from((at - started).max(0) / 1000).unwrap_or(0);
        while credited.len() <= sec {
            credited.push(BTreeMap::new());
            per_sec_e2e.push(hist());
        }
        *credited[sec].entry(ty.clone()).or_default() += 1;
        let _ = per_sec_e2e[sec].record(d);
        last_credit = last_credit.max(*at);
    }
    let mut missing_by_sec: Vec<u64> = Vec::new();
    for at in &reconciliation.tokens_missing_sent_ms {
        let sec = usize::try_from((at - started).max(0) / 1000).unwrap_or(0);
        if missing_by_sec.len() <= sec {
            missing_by_sec.resize(sec + 1, 0);
        }
        missing_by_sec[sec] += 1;
    }
    let len = credited
        .len()
        .max(c.per_second.len())
        .max(samples.len())
        .max(missing_by_sec.len());
    let mut timeline = Vec::with_capacity(len);
    for t in 0..len {
        let mut s = Second {
            t: t as u64,
            ..Second::default()
        };
        if let Some((sent, refused, h, lag)) = c.per_second.get(t) {
            s.sent = *sent;
            s.refused = *refused;
            s.scheduled = sent + refused;
            if !h.is_empty() {
                s.send_p50_us = h.value_at_quantile(0.5);
                s.send_p99_us = h.value_at_quantile(0.99);
            }
            if !lag.is_empty() {
                s.start_lag_p99_us = lag.value_at_quantile(0.99);
            }
        }
        s.tokens_missing = missing_by_sec.get(t).copied().unwrap_or(0);
        if let (Some(cr), Some(h)) = (credited.get(t), per_sec_e2e.get(t)) {
            s.credited = cr.clone();
            if !h.is_empty() {
                s.e2e_p50_ms = h.value_at_quantile(0.5);
                s.e2e_p99_ms = h.value_at_quantile(0.99);
            }
        }
        if let Some((cons, sdk)) = samples.get(t) {
            let g = |k: &str| cons.get(k).copied().unwrap_or(0);
            s.sdk_failovers = sdk.failovers;
            s.sdk_spooled = sdk.spooled;
            s.sdk_delivered = sdk.delivered;
            s.consumed = g("consumed");
            s.requeued_failed = g("requeued_failed");
            s.requeued_limited = g("requeued_limited");
            s.requeued_fused = g("requeued_fused");
            s.limiter_waits = g("limiter_waits");
            s.dead_lettered = g("dead_lettered");
            s.backlog = sdk.delivered.saturating_sub(s.consumed);
        }
        timeline.push(s);
    }
    let span_secs = ((last_credit - started).max(1) as f64) / 1000.0;
    let end_to_end_ms = Latency::of(&e2e);
    let start_lag_us = c.lag.as_ref().map(Latency::of).unwrap_or_default();
    let send_latency_us = c.send.as_ref().map(Latency::of).unwrap_or_default();
    let measured = crate::slo::Measured {
        calls_accepted: c.sent,
        calls_refused: c.refused.values().sum(),
        accepted: reconciliation.sent,
        tokens_missing: reconciliation.tokens_missing,
        send_p99_us: send_latency_us.p99,
        end_to_end_p99_ms: (end_to_end_ms.count > 0).then_some(end_to_end_ms.p99),
        start_lag_p99_us: start_lag_us.p99,
        start_lag_p999_us: start_lag_us.p999,
        shed,
        aborted,
        per_second: timeline
            .iter()
            .map(|s| crate::slo::SecondFigures {
                send_p99_us: s.send_p99_us,
                e2e_p99_ms: s.e2e_p99_ms,
                start_lag_p99_us: s.start_lag_p99_us,
                tokens_missing: s.tokens_missing,
            })
            .collect(),
    };
    let verdict = crate::slo::Verdict::judge(reconciliation.passed(), &plan.slo, &measured);
    let sched_secs = plan.duration_secs.max(0.001);
    ReplayReport {
        profile: plan.name.clone(),
        tag: setup.manifest.tag.clone(),
        verdict,
        duration_secs: plan.duration_secs,
        users: plan.users,
        scheduled,
        sent: c.sent,
        repeats: c.repeats,
        refused: c.refused.clone(),
        shed,
        send_latency_us,
        call_latency_us: c.call.as_ref().map(Latency::of).unwrap_or_default(),
        start_lag_us,
        end_to_end_ms,
        credited: reconciliation.credited,
        credited_per_sec: reconciliation.credited as f64 / span_secs,
        credited_peak_per_sec: credited
            .iter()
            .map(|m| m.values().sum::<u64>())
            .max()
            .unwrap_or(0),
        sent_per_sec: c.sent as f64 / sched_secs,
        span_secs,
        limits: setup.manifest.limits.clone(),
        faults,
        sdk: sdk_map,
        consumers,
        timeline,
        reconciliation,
        ceilings: None,
        wallet: BTreeMap::new(),
    }
}
