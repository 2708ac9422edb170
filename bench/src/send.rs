//! `reward-bench send`: the SDK's `send_reward` against a raw rdkafka producer, on the
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
//! stays below it: docs/findings/main-job-and-slos.md). Running both in
//! one process, back to back, is what makes the ratio meaningful on a shared machine
//! whose absolute speed drifts.
//!
//! # Latency at half load
//! A third run paces `send_reward` calls at half the rate the sdk run reached (or at
//! `paced_rate`, to compare two runs at the same load), for `latency_secs`, and
//! reports two sets of percentiles:
//! - **from schedule**: from the moment the schedule said the call should start, so a
//!   stalled process shows up as latency instead of silently sending less
//!   ("coordinated omission");
//! - **call**: from the call's own start to its return: what `send_reward` costs.
//!
//! Every call is spawned on its own, so a slow call never delays the next one; the only
//! thing between "scheduled" and "started" is the pacer and the runtime. The pacer is a
//! blocking thread using the OS's sleep (tens of µs late), not a tokio timer: tokio's
//! timer wheel ticks in whole milliseconds, and a pacer on it would dispatch its calls
//! in bursts up to a millisecond behind schedule, which would be charged to
//! `send_reward`.
//!
//! Every run checks its own counts: a run that did not get every event acknowledged, or
//! lost a token write, fails instead of reporting a rate.

use std::collections::BTreeMap;
use std::time::Duration;

use reward_baseline::producer::{raw_run, rewards};
use reward_baseline::{Percentiles, RunError, Throughput, unique_name};
use reward_stack::env::{Server, StackEnv, check_reachable};
use reward_stack::topics::create_kafka_topics;

mod agent_runs;
mod sdk_runs;

use self::agent_runs::{agent_paced_run, agent_run};
use self::sdk_runs::{paced_run, sdk_run};

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
    /// The paced run's calls per second; `None`: half the last sdk run's rate.
    pub paced_rate: Option<u64>,
    /// Rounds of (raw, sdk); the report keeps every round.
    pub rounds: u32,
    /// librdkafka settings laid over the stack's, for both sides alike (e.g.
    /// `linger.ms`), so a tuning is compared, never given to one side only.
    pub kafka_settings: BTreeMap<String, String>,
    /// The SDK's `store.write_mode` (`direct`, `batched` or `deferred`).
    pub write_mode: String,
    /// Also the agent path: the same SDK in a `reward-agent` child called over its
    /// socket, one reward a call and `agent_batch` a call, each round, and paced at the
    /// in-process paced run's rate.
    pub agent: bool,
    /// Rewards per `SendRewards` call in the agent's batch run.
    pub agent_batch: usize,
}

impl BenchOptions {
    /// The librdkafka settings both sides run with: the caller's.
    fn kafka_settings(&self) -> BTreeMap<String, String> {
        self.kafka_settings.clone()
    }
}

/// Why a bench run failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A server does not answer.
    #[error(transparent)]
    Stack(#[from] reward_stack::env::StackError),
    /// A run (the raw baseline's or the SDK's) failed: its set-up, or it lost or
    /// refused events, so its rate would be meaningless.
    #[error(transparent)]
    Run(#[from] RunError),
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

/// One round: raw, sdk, and with `--agent` the agent's two runs.
#[derive(Debug, Clone)]
pub struct Round {
    /// The raw rdkafka baseline.
    pub raw: Throughput,
    /// `send_reward`.
    pub sdk: Throughput,
    /// SendReward through the agent, one reward a call.
    pub agent: Option<Throughput>,
    /// SendRewards through the agent.
    pub agent_batch: Option<Throughput>,
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
    /// The paced run through the agent, at the same rate.
    pub agent_paced: Option<Paced>,
    /// Times Redis forked (AOF rewrite, RDB save) during the timed runs; `None` when
    /// Redis could not tell ([`reward_stack::env::ForkWatch`]).
    pub redis_forks: Option<u64>,
}

/// Runs the benchmark.
pub async fn run(env: &StackEnv, opts: &BenchOptions) -> Result<BenchReport, BenchError> {
    let probe = Duration::from_secs(2);
    check_reachable(Server::Redis, &env.redis_host_port()?, probe).await?;
    check_reachable(Server::Kafka, env.first_kafka_broker(), probe).await?;
    let mut rounds = Vec::new();
    let mut last_sdk_rate = 0.0;
    let kafka = opts.kafka_settings();
    let forks = reward_stack::env::ForkWatch::start(&env.redis_url).await;
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
        .map_err(RunError::Setup)?;
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
        let (agent, agent_batch) = if opts.agent {
            let topics = [format!("{tag}-agent"), format!("{tag}-agent-batch")];
            let names: Vec<&str> = topics.iter().map(String::as_str).collect();
            create_kafka_topics(&env.kafka_brokers, &names, opts.partitions)
                .await
                .map_err(RunError::Setup)?;
            (Some(topics), Some(reqs.clone()))
        } else {
            (None, None)
        };
        let sdk = sdk_run(env, &side, &tag, &sdk_topic, reqs, opts.concurrency).await?;
        last_sdk_rate = sdk.rate();
        let (agent, agent_batch) = match (agent, agent_batch) {
            (Some(topics), Some(reqs)) => {
                eprintln!(
                    "[bench] round {round}: the agent, one reward a call, {} callers",
                    opts.concurrency
                );
                let one = agent_run(
                    env,
                    &side,
                    &format!("{tag}-a"),
                    &topics[0],
                    reqs.clone(),
                    opts.concurrency,
                    1,
                )
                .await?;
                eprintln!(
                    "[bench] round {round}: the agent, {} rewards a call",
                    opts.agent_batch
                );
                let callers = opts.concurrency.div_ceil(opts.agent_batch.max(1)).max(2);
                let batch = agent_run(
                    env,
                    &side,
                    &format!("{tag}-b"),
                    &topics[1],
                    reqs,
                    callers,
                    opts.agent_batch,
                )
                .await?;
                (Some(one), Some(batch))
            }
            _ => (None, None),
        };
        rounds.push(Round {
            raw,
            sdk,
            agent,
            agent_batch,
        });
    }
    let (paced, agent_paced) = if opts.latency_secs > 0 {
        let tag = unique_name("bench-paced");
        let topic = format!("{tag}-sdk");
        create_kafka_topics(&env.kafka_brokers, &[topic.as_str()], opts.partitions)
            .await
            .map_err(RunError::Setup)?;
        let target = opts
            .paced_rate
            .map_or((last_sdk_rate / 2.0).max(1.0), |r| r as f64);
        eprintln!(
            "[bench] paced send_reward at {target:.0}/s for {} s",
            opts.latency_secs
        );
        let paced = paced_run(env, &side, &tag, &topic, target, opts.latency_secs).await?;
        let agent_paced = if opts.agent {
            let topic = format!("{tag}-agent");
            create_kafka_topics(&env.kafka_brokers, &[topic.as_str()], opts.partitions)
                .await
                .map_err(RunError::Setup)?;
            eprintln!(
                "[bench] paced SendReward through the agent at {target:.0}/s for {} s",
                opts.latency_secs
            );
            Some(
                agent_paced_run(
                    env,
                    &side,
                    &format!("{tag}-a"),
                    &topic,
                    target,
                    opts.latency_secs,
                )
                .await?,
            )
        } else {
            None
        };
        (Some(paced), agent_paced)
    } else {
        (None, None)
    };
    Ok(BenchReport {
        rounds,
        paced,
        agent_paced,
        redis_forks: forks.since_start().await,
    })
}

/// How the SDK under test is set up: the librdkafka settings laid over the stack's and
/// the token store's write mode.
struct SdkSide<'a> {
    kafka: &'a BTreeMap<String, String>,
    write_mode: &'a str,
}
