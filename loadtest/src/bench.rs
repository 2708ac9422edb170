//! `loadtest bench`: the SDK's `send_reward` against a raw rdkafka producer, on the
//! real stack, in one process.
//!
//! # What is compared
//! Both sides send the same rewards (the same encoded `RewardEvent` payloads, keyed by
//! trade number) to their own fresh topic on the local Kafka broker, with the same
//! librdkafka settings ([`sdk::queue::producer::kafka_client_config`]), and the clock
//! stops for each side when the broker has acknowledged the last event:
//!
//! - **raw**: one loop hands every payload to a `FutureProducer` and awaits every
//!   delivery report. This is the ceiling: no validation, no token, no Redis.
//! - **sdk**: `concurrency` callers call `send_reward` (validate, seal the token, write
//!   it to Redis, queue the event); the clock stops when the SDK's counters show every
//!   accepted event delivered.
//!
//! The ratio sdk/raw is the headline figure (target ≥ 0.9; why this 2-core machine
//! stays near 0.75: docs/findings/main-job-and-slos.md). Running both in
//! one process, back to back, is what makes the ratio meaningful on a shared machine
//! whose absolute speed drifts.
//!
//! # Latency at half load
//! A third run paces `send_reward` calls at half the rate the sdk run reached, for
//! `latency_secs`, and reports two sets of percentiles:
//! - **from schedule**: from the moment the schedule said the call should start, so a
//!   stalled process shows up as latency instead of silently sending less
//!   ("coordinated omission");
//! - **call**: from the call's own start to its return: what `send_reward` costs.
//!
//! Every call is spawned on its own, so a slow call never delays the next one; the only
//! thing between "scheduled" and "started" is the pacer and the runtime. The pacer is a
//! blocking thread using the OS's sleep (tens of µs late), not a tokio timer: tokio's
//! timer wheel ticks in whole milliseconds, and a pacer on it dispatched its calls in
//! bursts up to a millisecond behind schedule, which the first measurements charged to
//! `send_reward` (BENCHMARKS.md).
//!
//! Both sides add [`reward_tools::stack::STACK_KAFKA_SETTINGS`] (no idempotence): the
//! stack's tansu 0.6 panics under an idempotent producer at volume (docs/stack.md).
//!
//! Every run checks its own counts: a run that did not get every event acknowledged, or
//! lost a token write, fails instead of reporting a rate.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use prost::Message as _;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};
use reward_tools::topics::create_kafka_topics;
use sdk::config::SdkConfig;
use sdk::request::{RedEnvelopeRain, RewardRequest, User};
use sdk::token::KeyRing;
use sdk::{Sdk, SendError};

use crate::smoke::kafka::first_broker;
use crate::smoke::unique_name;
use reward_tools::stack::{Server, StackEnv, check_reachable};

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Rewards per throughput run.
    pub rewards: u64,
    /// Concurrent `send_reward` callers in the sdk run.
    pub concurrency: usize,
    /// Partitions of each topic.
    pub partitions: i32,
    /// Length of the paced latency run; 0 skips it.
    pub latency_secs: u64,
    /// Rounds of (raw, sdk); the report keeps every round.
    pub rounds: u32,
    /// librdkafka settings laid over the stack's, for both sides alike (e.g.
    /// `linger.ms`), so a tuning is compared, never given to one side only.
    pub kafka_settings: BTreeMap<String, String>,
    /// The SDK's `store.write_mode` (`direct`, `batched` or `deferred`).
    pub write_mode: String,
}

impl BenchOptions {
    /// The librdkafka settings both sides run with: the stack's, then the caller's.
    fn kafka_settings(&self) -> BTreeMap<String, String> {
        let mut all = reward_tools::stack::stack_kafka_settings();
        all.extend(self.kafka_settings.clone());
        all
    }
}

/// Why a bench run failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A server does not answer.
    #[error(transparent)]
    Stack(#[from] reward_tools::stack::StackError),
    /// Setting up (topics, producer, SDK) failed.
    #[error("set-up: {0}")]
    Setup(String),
    /// A run lost or refused events: its rate would be meaningless.
    #[error("{run}: {what}")]
    Incomplete {
        /// Which run.
        run: &'static str,
        /// What went wrong.
        what: String,
    },
}

/// One throughput run.
#[derive(Debug, Clone)]
pub struct Throughput {
    /// Events acknowledged by the broker.
    pub events: u64,
    /// From the first send to the last acknowledgement.
    pub elapsed: Duration,
    /// Per-call latency of the sends (for raw: the enqueue call), microseconds.
    pub calls: Percentiles,
}

impl Throughput {
    /// Acknowledged events per second.
    pub fn rate(&self) -> f64 {
        crate::smoke::rate(self.events, self.elapsed)
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest.
    pub max: u64,
}

impl Percentiles {
    /// From unsorted samples (sorted in place).
    pub fn of(samples: &mut [u64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_unstable();
        let at = |q: f64| {
            // Nearest-rank: the smallest sample with at least q of them at or below it.
            let rank = (q * samples.len() as f64).ceil() as usize;
            samples[rank.clamp(1, samples.len()) - 1]
        };
        Self {
            count: samples.len() as u64,
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            max: samples[samples.len() - 1],
        }
    }
}

/// The paced run.
#[derive(Debug, Clone)]
pub struct Paced {
    /// Calls per second asked for.
    pub target_rate: f64,
    /// Calls per second achieved.
    pub achieved_rate: f64,
    /// Latency from scheduled start to return, microseconds.
    pub latency: Percentiles,
    /// Latency from the call's own start to its return, microseconds.
    pub call: Percentiles,
    /// Calls refused (back-pressure or other error).
    pub refused: u64,
}

/// One round: raw then sdk.
#[derive(Debug, Clone)]
pub struct Round {
    /// The raw rdkafka baseline.
    pub raw: Throughput,
    /// `send_reward`.
    pub sdk: Throughput,
}

impl Round {
    /// sdk rate / raw rate.
    pub fn ratio(&self) -> f64 {
        let raw = self.raw.rate();
        if raw > 0.0 {
            self.sdk.rate() / raw
        } else {
            0.0
        }
    }
}

/// Everything measured.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// Throughput rounds.
    pub rounds: Vec<Round>,
    /// The paced latency run, if asked for.
    pub paced: Option<Paced>,
    /// Times Redis forked (AOF rewrite, RDB save) during the timed runs; `None` when
    /// Redis could not tell ([`reward_tools::stack::ForkWatch`]).
    pub redis_forks: Option<u64>,
}

/// The rewards of one run: one red-envelope grab per user, in activity `activity`.
fn rewards(activity: &str, n: u64) -> Vec<RewardRequest> {
    let rain = RedEnvelopeRain::new(activity, "cash");
    (0..n)
        .map(|i| {
            rain.grab(
                &User::new((1_000_000 + i).to_string()),
                1,
                1 + (i % 500) as i64,
            )
        })
        .collect()
}

/// Runs the benchmark.
pub async fn run(env: &StackEnv, opts: &BenchOptions) -> Result<BenchReport, BenchError> {
    let probe = Duration::from_secs(2);
    check_reachable(Server::Redis, &env.redis_host_port()?, probe).await?;
    check_reachable(Server::Kafka, first_broker(env), probe).await?;
    let mut rounds = Vec::new();
    let mut last_sdk_rate = 0.0;
    let kafka = opts.kafka_settings();
    let forks = reward_tools::stack::ForkWatch::start(&env.redis_url).await;
    eprintln!("[bench] SDK token store write mode: {}", opts.write_mode);
    let side = SdkSide {
        kafka: &kafka,
        write_mode: &opts.write_mode,
    };
    for round in 1..=opts.rounds.max(1) {
        let tag = unique_name("bench");
        let raw_topic = format!("{tag}-raw");
        let sdk_topic = format!("{tag}-sdk");
        create_kafka_topics(
            &env.kafka_brokers,
            &[raw_topic.as_str(), sdk_topic.as_str()],
            opts.partitions,
        )
        .await
        .map_err(BenchError::Setup)?;
        let reqs = rewards(&tag, opts.rewards);
        eprintln!(
            "[bench] round {round}: raw rdkafka, {} events",
            opts.rewards
        );
        let raw = raw_run(env, &kafka, &raw_topic, &reqs).await?;
        eprintln!(
            "[bench] round {round}: send_reward, {} rewards, {} callers",
            opts.rewards, opts.concurrency
        );
        let sdk = sdk_run(env, &side, &tag, &sdk_topic, reqs, opts.concurrency).await?;
        last_sdk_rate = sdk.rate();
        rounds.push(Round { raw, sdk });
    }
    let paced = if opts.latency_secs > 0 {
        let tag = unique_name("bench-paced");
        let topic = format!("{tag}-sdk");
        create_kafka_topics(&env.kafka_brokers, &[topic.as_str()], opts.partitions)
            .await
            .map_err(BenchError::Setup)?;
        let target = (last_sdk_rate / 2.0).max(1.0);
        eprintln!(
            "[bench] paced send_reward at {target:.0}/s for {} s",
            opts.latency_secs
        );
        Some(paced_run(env, &side, &tag, &topic, target, opts.latency_secs).await?)
    } else {
        None
    };
    Ok(BenchReport {
        rounds,
        paced,
        redis_forks: forks.since_start().await,
    })
}

/// The bare producer's ceiling on this broker: `n` reward events (the SDK's wire
/// bytes) through a raw rdkafka producer with the SDK's settings, events/s. The
/// replay's `--ceilings` puts it beside the end-to-end rate.
pub async fn raw_ceiling(env: &StackEnv, n: u64, partitions: i32) -> Result<f64, BenchError> {
    let tag = unique_name("ceiling");
    let topic = format!("{tag}-raw");
    create_kafka_topics(&env.kafka_brokers, &[topic.as_str()], partitions)
        .await
        .map_err(BenchError::Setup)?;
    let kafka = BenchOptions {
        rewards: n,
        concurrency: 1,
        partitions,
        latency_secs: 0,
        rounds: 1,
        kafka_settings: BTreeMap::new(),
        write_mode: "direct".into(),
    }
    .kafka_settings();
    Ok(raw_run(env, &kafka, &topic, &rewards(&tag, n))
        .await?
        .rate())
}

async fn raw_run(
    env: &StackEnv,
    kafka: &BTreeMap<String, String>,
    topic: &str,
    reqs: &[RewardRequest],
) -> Result<Throughput, BenchError> {
    let timeout = Duration::from_secs(30);
    let producer: FutureProducer =
        sdk::queue::producer::kafka_client_config(&env.kafka_brokers, kafka, timeout)
            .create()
            .map_err(|e| BenchError::Setup(format!("raw producer: {e}")))?;
    // The same bytes the SDK puts on the wire.
    let now = 1_790_000_000_000;
    let payloads: Vec<(String, Vec<u8>)> = reqs
        .iter()
        .map(|r| (r.trade_no.clone(), r.event(now).encode_to_vec()))
        .collect();
    let mut calls = Vec::with_capacity(payloads.len());
    let mut pending = Vec::with_capacity(payloads.len());
    let start = Instant::now();
    for (key, payload) in &payloads {
        let t = Instant::now();
        loop {
            let record = FutureRecord::to(topic).key(key.as_bytes()).payload(payload);
            match producer.send_result(record) {
                Ok(f) => {
                    pending.push(f);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err((e, _)) => {
                    return Err(BenchError::Incomplete {
                        run: "raw",
                        what: format!("enqueue: {e}"),
                    });
                }
            }
        }
        calls.push(micros(t.elapsed()));
    }
    let mut acked = 0u64;
    let mut first_error = None;
    for f in pending {
        match f.await {
            Ok(Ok(_)) => acked += 1,
            Ok(Err((e, _))) => {
                first_error.get_or_insert_with(|| e.to_string());
            }
            Err(_) => {
                first_error.get_or_insert_with(|| "delivery report dropped".to_string());
            }
        }
    }
    let elapsed = start.elapsed();
    if acked != payloads.len() as u64 {
        return Err(BenchError::Incomplete {
            run: "raw",
            what: format!(
                "{acked} of {} acknowledged; first error: {}",
                payloads.len(),
                first_error.unwrap_or_default()
            ),
        });
    }
    Ok(Throughput {
        events: acked,
        elapsed,
        calls: Percentiles::of(&mut calls),
    })
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// An SDK with one Kafka-only queue on `topic` (backup = primary: the bench measures the
/// happy path), fresh keys, its own Redis prefix and spool directory.
/// How the SDK under test is set up.
struct SdkSide<'a> {
    kafka: &'a BTreeMap<String, String>,
    write_mode: &'a str,
}

async fn start_sdk(
    env: &StackEnv,
    side: &SdkSide<'_>,
    tag: &str,
    topic: &str,
) -> Result<Sdk, BenchError> {
    let settings = reward_tools::stack::kafka_settings_toml(side.kafka);
    let spool = std::env::temp_dir().join(format!("reward-{tag}-spool"));
    let text = format!(
        r#"
        default_queue = "bench"
        [store]
        redis_url = "{redis}"
        key_prefix = "{tag}"
        ttl_secs = 600
        write_mode = "{write_mode}"
        [producers.k]
        kind = "kafka"
        brokers = "{kafka}"
        {settings}
        [queues.bench]
        topic = "{topic}"
        primary = "k"
        backup = "k"
        ratio = 100
        [types.cash]
        [spool]
        dir = "{spool}"
        "#,
        redis = env.redis_url,
        kafka = env.kafka_brokers,
        spool = spool.display(),
        write_mode = side.write_mode,
    );
    let config = SdkConfig::from_toml_str(&text).map_err(|e| BenchError::Setup(e.to_string()))?;
    Sdk::builder(config)
        .key_ring(KeyRing::random(1))
        .watch(false)
        .start()
        .await
        .map_err(|e| BenchError::Setup(format!("sdk: {e}")))
}

/// Waits until the SDK has every accepted event delivered; fails if it spooled or
/// logged any (the broker refused them), or after `limit`.
async fn wait_delivered(
    sdk: &Sdk,
    want: u64,
    run: &'static str,
    limit: Duration,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + limit;
    loop {
        let s = sdk.stats();
        if s.spooled > 0 || s.logged > 0 {
            return Err(BenchError::Incomplete {
                run,
                what: format!(
                    "{} spooled, {} logged: the broker refused events",
                    s.spooled, s.logged
                ),
            });
        }
        if s.delivered >= want {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::Incomplete {
                run,
                what: format!("{} of {want} delivered within {limit:?}", s.delivered),
            });
        }
        // Coarse enough not to take CPU from the run being timed (2 cores), fine
        // enough to be noise on runs of seconds.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn finish(sdk: &Sdk, run: &'static str) -> Result<(), BenchError> {
    let report = sdk.close(Duration::from_secs(30)).await;
    // Read after close: deferred writes are answered by then.
    let failures = sdk.token_write_failures();
    if report.left > 0 || report.tokens_left > 0 {
        return Err(BenchError::Incomplete {
            run,
            what: format!(
                "{} events and {} token writes unsettled at close",
                report.left, report.tokens_left
            ),
        });
    }
    if failures > 0 {
        return Err(BenchError::Incomplete {
            run,
            what: format!("{failures} token writes failed"),
        });
    }
    Ok(())
}

async fn sdk_run(
    env: &StackEnv,
    side: &SdkSide<'_>,
    tag: &str,
    topic: &str,
    reqs: Vec<RewardRequest>,
    concurrency: usize,
) -> Result<Throughput, BenchError> {
    let sdk = start_sdk(env, side, tag, topic).await?;
    let n = reqs.len() as u64;
    let concurrency = concurrency.max(1);
    // Deal the requests out before the clock starts.
    let mut shares: Vec<Vec<RewardRequest>> = (0..concurrency).map(|_| Vec::new()).collect();
    for (i, r) in reqs.into_iter().enumerate() {
        shares[i % concurrency].push(r);
    }
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for share in shares {
        let sdk = sdk.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(share.len());
            for r in share {
                let t = Instant::now();
                loop {
                    match sdk.send_reward(r.clone()).await {
                        Ok(_) => break,
                        // Back-pressure is the SDK asking the caller to slow down: a
                        // caller at full speed retries, as a real one would.
                        Err(SendError::Backpressure(_)) => tokio::task::yield_now().await,
                        Err(e) => return Err(format!("{}: {e}", r.trade_no)),
                    }
                }
                lat.push(micros(t.elapsed()));
            }
            Ok(lat)
        }));
    }
    let mut calls = Vec::with_capacity(n as usize);
    for t in tasks {
        match t.await {
            Ok(Ok(l)) => calls.extend(l),
            Ok(Err(e)) => {
                return Err(BenchError::Incomplete {
                    run: "sdk",
                    what: format!("send_reward refused {e}"),
                });
            }
            Err(e) => {
                return Err(BenchError::Incomplete {
                    run: "sdk",
                    what: format!("caller task: {e}"),
                });
            }
        }
    }
    wait_delivered(&sdk, n, "sdk", Duration::from_secs(120)).await?;
    let elapsed = start.elapsed();
    finish(&sdk, "sdk").await?;
    Ok(Throughput {
        events: n,
        elapsed,
        calls: Percentiles::of(&mut calls),
    })
}

async fn paced_run(
    env: &StackEnv,
    side: &SdkSide<'_>,
    tag: &str,
    topic: &str,
    rate: f64,
    secs: u64,
) -> Result<Paced, BenchError> {
    let sdk = start_sdk(env, side, tag, topic).await?;
    let sdk_for_pacer = sdk.clone();
    let total = ((rate * secs as f64) as u64).max(1);
    let reqs = rewards(tag, total);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Result<(u64, u64), String>>();
    let start = Instant::now();
    let period = Duration::from_secs_f64(1.0 / rate);
    let runtime = tokio::runtime::Handle::current();
    // The pacer: a blocking thread that sleeps with the OS's timer and spawns each call
    // on the runtime when it is due (see the module doc for why not a tokio timer).
    let pacer = tokio::task::spawn_blocking(move || {
        for (i, r) in reqs.into_iter().enumerate() {
            let due = start + period.mul_f64(i as f64);
            let now = Instant::now();
            // Calls due within 50 µs go at once: one sleep a call would cost more than
            // the sleep's own precision at 10 k calls/s.
            if due > now + Duration::from_micros(50) {
                std::thread::sleep(due - now);
            }
            let (sdk, tx) = (sdk_for_pacer.clone(), tx.clone());
            runtime.spawn(async move {
                let begun = Instant::now();
                let out = match sdk.send_reward(r).await {
                    Ok(_) => Ok((micros(due.elapsed()), micros(begun.elapsed()))),
                    Err(e) => Err(e.to_string()),
                };
                let _ = tx.send(out);
            });
        }
    });
    let mut lat = Vec::with_capacity(total as usize);
    let mut call = Vec::with_capacity(total as usize);
    let mut refused = 0u64;
    let mut first_refusal = None;
    while let Some(r) = rx.recv().await {
        match r {
            Ok((from_schedule, own)) => {
                lat.push(from_schedule);
                call.push(own);
            }
            Err(e) => {
                refused += 1;
                first_refusal.get_or_insert(e);
            }
        }
    }
    pacer
        .await
        .map_err(|e| BenchError::Setup(format!("pacer thread: {e}")))?;
    let sent_for = start.elapsed();
    let accepted = lat.len() as u64;
    wait_delivered(&sdk, accepted, "paced", Duration::from_secs(120)).await?;
    finish(&sdk, "paced").await?;
    if let Some(e) = first_refusal {
        eprintln!("[bench] paced run: {refused} calls refused, first: {e}");
    }
    Ok(Paced {
        target_rate: rate,
        achieved_rate: accepted as f64 / sent_for.as_secs_f64().max(1e-9),
        latency: Percentiles::of(&mut lat),
        call: Percentiles::of(&mut call),
        refused,
    })
}

#[cfg(test)]
mod tests {
    use super::Percentiles;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u64> = (1..=1000).rev().collect();
        let p = Percentiles::of(&mut v);
        assert_eq!(
            p,
            Percentiles {
                count: 1000,
                p50: 500,
                p99: 990,
                p999: 999,
                max: 1000
            }
        );
        assert_eq!(Percentiles::of(&mut []), Percentiles::default());
        assert_eq!(Percentiles::of(&mut [7]).p99, 7);
    }
}
