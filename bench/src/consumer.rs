//! `reward-bench consumer`: the consumer (reward service in the loop, limits open)
//! against a bare rdkafka consumer reading and storing offsets, on the same topic, in
//! the same run.
//!
//! # What is compared
//! - **raw**: a `StreamConsumer` in a fresh group reads the topic from the start and
//!   stores each message's offset (`enable.auto.offset.store=false`, auto commit of
//!   the stored offsets), doing nothing else. That is the ceiling of fetching from this
//!   broker on this machine. It runs with the consumer's fetch settings
//!   (`reward_consumer::kafka::FETCH_DEFAULTS`, then `--consumer-setting`), so both
//!   sides fetch alike.
//! - **consumer**: `reward_consumer` in this process (config `ops/consumer.toml`, the
//!   cash limit raised out of the way) in another fresh group, crediting every event
//!   through the reward service (also in this process, `ops/reward-service.toml`, the
//!   Redis ledger as downstream) with `GrantBatch`.
//!
//! Each side is timed twice, the same way for both:
//! - **from start**: from creating the consumer (for ours: the whole `start`, i.e. the
//!   SDK it requeues through with its Kafka and RocketMQ producers, Redis pools, the
//!   delay queue, the gRPC channel) to the last message handled (read, for raw;
//!   credited, for ours). Start-up and the first group join weigh in here, more so on
//!   short runs.
//! - **steady**: from the first message handled to the last: the rate once running,
//!   which is what "throughput" means for a consumer that runs for hours.
//!
//! Both ratios are printed (target ≥ 0.8) with the time each side took to its first
//! message. BENCHMARKS.md leads with "from start", which charges each side everything;
//! "steady" drops the start-up, and with it raw's wait for its first (largest) fetch
//! answer, so it tends to come out a little lower.
//!
//! # Checks
//! The run fails instead of reporting a rate unless the raw consumer saw every
//! message, and the consumer credited every event exactly once (the ledger balance of
//! every user equals the events sent to them), with nothing parked, dead-lettered or
//! left in flight.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::{ClientConfig, Message};
use reward_baseline::parts::{produce_events, start_consumer, start_service};
use reward_service::downstream::Ledger;
use reward_stack::env::{Server, StackEnv, check_reachable};

/// What to run.
#[derive(Debug, Clone)]
pub struct ConsumerBenchOptions {
    /// Events on the topic.
    pub messages: u64,
    /// Partitions of the topic.
    pub partitions: i32,
    /// Users the events are spread over.
    pub users: u64,
    /// GrantBatch calls the consumer keeps in flight (`pipeline.concurrency`).
    pub concurrency: usize,
    /// Events per GrantBatch call at most (`pipeline.batch`); `None`: the config's.
    pub batch: Option<usize>,
    /// librdkafka settings for both consumers (over the consumer's fetch defaults).
    pub consumer_settings: Vec<(String, String)>,
}

/// One side's timing.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Messages per second from creating the consumer to the last message.
    pub from_start: f64,
    /// Messages per second from the first message to the last.
    pub steady: f64,
    /// From creating the consumer to its first message.
    pub to_first: Duration,
}

impl Timing {
    fn new(n: u64, start: Instant, first: Instant, last: Instant) -> Self {
        let secs = |d: Duration| d.as_secs_f64().max(1e-9);
        Timing {
            from_start: n as f64 / secs(last - start),
            // n - 1 gaps between the first message and the last.
            steady: n.saturating_sub(1) as f64 / secs(last - first),
            to_first: first - start,
        }
    }
}

/// The figures.
#[derive(Debug, Clone)]
pub struct ConsumerBenchReport {
    /// The bare consumer.
    pub raw: Timing,
    /// The consumer, credits per second.
    pub consumer: Timing,
    /// The consumer's counters at the end.
    pub stats: reward_consumer::pipeline::StatsSnapshot,
    /// Times Redis forked (AOF rewrite, RDB save) during the two timed runs; `None`
    /// when Redis could not tell ([`reward_stack::env::ForkWatch`]).
    pub redis_forks: Option<u64>,
}

impl ConsumerBenchReport {
    /// consumer / raw, each from its start.
    pub fn ratio(&self) -> f64 {
        self.consumer.from_start / self.raw.from_start
    }

    /// consumer / raw, each from its first message.
    pub fn steady_ratio(&self) -> f64 {
        self.consumer.steady / self.raw.steady
    }
}

async fn raw(
    env: &StackEnv,
    topic: &str,
    n: u64,
    settings: &[(String, String)],
) -> anyhow::Result<Timing> {
    let start = Instant::now();
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &env.kafka_brokers)
        .set("group.id", format!("cb-raw-{:08x}", rand::random::<u32>()))
        .set("enable.auto.commit", "true")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest");
    // The same fetch settings as the consumer under test, so a fetch tuning is
    // compared, never given to one side only.
    for (k, v) in reward_consumer::kafka::FETCH_DEFAULTS {
        cfg.set(*k, *v);
    }
    for (k, v) in settings {
        cfg.set(k, v);
    }
    let consumer: StreamConsumer = cfg.create()?;
    consumer.subscribe(&[topic])?;
    let mut seen = 0u64;
    let mut first = None;
    while seen < n {
        let m = tokio::time::timeout(Duration::from_secs(120), consumer.recv())
            .await
            .map_err(|_| anyhow::anyhow!("raw consumer: nothing for 120 s at {seen} of {n}"))??;
        consumer.store_offset(m.topic(), m.partition(), m.offset() + 1)?;
        first.get_or_insert_with(Instant::now);
        seen += 1;
    }
    let last = Instant::now();
    let timing = Timing::new(n, start, first.unwrap_or(last), last);
    consumer.unsubscribe();
    if !reward_runtime::teardown::drop_within(consumer, Duration::from_secs(30)) {
        anyhow::bail!("the raw consumer's close hung");
    }
    Ok(timing)
}

/// Runs both sides; fails on any lost, doubled or parked event.
pub async fn run(
    env: &StackEnv,
    opts: &ConsumerBenchOptions,
) -> anyhow::Result<ConsumerBenchReport> {
    let probe = Duration::from_secs(2);
    check_reachable(Server::Redis, &env.redis_host_port()?, probe).await?;
    check_reachable(Server::WalletRedis, &env.wallet_host_port()?, probe).await?;
    check_reachable(Server::Kafka, env.first_kafka_broker(), probe).await?;
    check_reachable(Server::RocketMqNameServer, &env.rocketmq_namesrv, probe).await?;
    // A failed run drops its mark (removed in the background, or run out within its
    // TTL) and keeps its keys.
    let live =
        reward_tools::clean::LiveRun::start(&[&env.redis_url, &env.wallet_redis_url]).await?;
    let tag = live.tag().to_string();
    let dir = std::env::temp_dir().join(format!("consumer-bench-{tag}"));
    let (service, credential) = start_service(env, &tag, &dir, 0, &env.wallet_redis_url).await?;
    let claims = service.service().granter().claims().clone();
    let scope = reward_service::service::scope("bench", "rain");
    claims
        .set_budget(&scope, i64::try_from(opts.messages)?.saturating_mul(2))
        .await?;

    let topic = format!("cb-{tag}");
    reward_stack::topics::create_kafka_topics(&env.kafka_brokers, &[&topic], opts.partitions)
        .await
        .map_err(anyhow::Error::msg)?;
    let proofs = service.service().sdk().codec().proofs();
    produce_events(env, &topic, opts.messages, opts.users, proofs).await?;
    eprintln!("consumer-bench: {} events on {topic}", opts.messages);

    let forks = reward_stack::env::ForkWatch::start(&env.redis_url).await;
    let raw_timing = raw(env, &topic, opts.messages, &opts.consumer_settings).await?;
    eprintln!(
        "consumer-bench: raw {:.0} msg/s from start, {:.0} steady",
        raw_timing.from_start, raw_timing.steady
    );

    let start = Instant::now();
    let consumer = start_consumer(
        env,
        &tag,
        &dir,
        &topic,
        &service.grpc_addr.to_string(),
        credential,
        &opts.consumer_settings,
        &overrides(opts),
    )
    .await?;
    let first = wait_credited(&consumer, start, opts.messages).await?;
    let end = Instant::now();
    let redis_forks = forks.since_start().await;
    let consumer_timing = Timing::new(opts.messages, start, first.unwrap_or(end), end);
    let report = consumer.shutdown().await;
    let stats = report.stats.clone();
    service.shutdown().await;

    // Reconcile: every user credited exactly the events sent to them.
    check_ledger(env, &tag, opts).await?;
    if stats.granted != opts.messages
        || stats.requeued_failed + stats.requeued_limited + stats.dead_lettered + stats.last_resort
            > 0
        || report.unsettled > 0
    {
        anyhow::bail!("not a clean run: {stats:?}, {} unsettled", report.unsettled);
    }
    reward_tools::clean::bench_run(&env.redis_url, &tag).await;
    reward_tools::clean::bench_run(&env.wallet_redis_url, &tag).await;
    live.end().await;
    Ok(ConsumerBenchReport {
        raw: raw_timing,
        consumer: consumer_timing,
        stats,
        redis_forks,
    })
}

/// The consumer's `REWARD_CONSUMER__…` overrides for the run: the cash limit and the
/// global burst raised out of the way, the pipeline's concurrency and batch from
/// `opts`.
fn overrides(opts: &ConsumerBenchOptions) -> Vec<(String, String)> {
    [
        (
            "REWARD_CONSUMER__LIMITS__TYPES__CASH__RATE".into(),
            "100000000".into(),
        ),
        (
            "REWARD_CONSUMER__LIMITS__GLOBAL_BURST".into(),
            "100000".into(),
        ),
        (
            "REWARD_CONSUMER__PIPELINE__CONCURRENCY".into(),
            opts.concurrency.to_string(),
        ),
    ]
    .into_iter()
    .chain(opts.batch.map(|b| {
        (
            "REWARD_CONSUMER__PIPELINE__BATCH".to_string(),
            b.to_string(),
        )
    }))
    .collect::<Vec<_>>()
}

/// Waits until `consumer` (started at `start`) has credited `messages` events
/// (granted, or answered as duplicates), printing progress once a second; fails after
/// 600 s, or when that count has not moved for 120 s. Returns when it consumed its
/// first event.
async fn wait_credited(
    consumer: &reward_consumer::Running,
    start: Instant,
    messages: u64,
) -> anyhow::Result<Option<Instant>> {
    let deadline = start + Duration::from_secs(600);
    let mut last = 0;
    let mut last_move = Instant::now();
    let mut first = None;
    let mut next_report = start + Duration::from_secs(1);
    // Polled every millisecond: the error on either end is far below the run's length.
    loop {
        let s = consumer.stats();
        if s.consumed > 0 {
            first.get_or_insert_with(Instant::now);
        }
        if Instant::now() >= next_report {
            // Progress once a second, on stderr: where a slow run spends its time.
            eprintln!(
                "consumer-bench: {:>5.1} s  consumed {:>8}  credited {:>8}",
                start.elapsed().as_secs_f64(),
                s.consumed,
                s.granted + s.duplicates
            );
            next_report += Duration::from_secs(1);
        }
        let done = s.granted + s.duplicates;
        if done >= messages {
            break;
        }
        if done != last {
            last = done;
            last_move = Instant::now();
        }
        if Instant::now() > deadline || last_move.elapsed() > Duration::from_secs(120) {
            anyhow::bail!("consumer stalled at {done} of {messages}: {s:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(first)
}

/// Every user's ledger balance (ledger prefix `gbl-<tag>`) equals the events sent to
/// them.
async fn check_ledger(
    env: &StackEnv,
    tag: &str,
    opts: &ConsumerBenchOptions,
) -> anyhow::Result<()> {
    let ledger = Ledger::connect(
        &env.wallet_redis_url,
        &format!("gbl-{tag}"),
        &HashMap::new(),
    )
    .await?;
    for u in 0..opts.users.min(opts.messages) {
        let want = (opts.messages - u).div_ceil(opts.users);
        let got = ledger.balance(&u.to_string(), "cash").await?;
        if got != i64::try_from(want)? {
            anyhow::bail!("user {u}: ledger {got}, sent {want}");
        }
    }
    Ok(())
}
