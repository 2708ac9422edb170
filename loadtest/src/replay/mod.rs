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

mod assemble;
mod children;
mod collect;
pub mod discovery;
mod drain;
pub mod hosts;
mod inject;
mod links;
pub mod recovery;
mod run;
mod schedule;

use std::collections::BTreeMap;
use std::path::PathBuf;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::faults::Fault;
use crate::profile::Plan;
use reward_tools::stack::StackEnv;

pub use self::children::scrape;
use self::run::Run;

/// Requests in flight above which new arrivals are shed (counted).
pub const MAX_IN_FLIGHT: u64 = 100_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The fitted profile.
    pub plan: Plan,
    /// Where run directories go.
    pub out: PathBuf,
    /// Reward service instances (the consumers balance over them).
    pub services: u32,
    /// SDK host processes (0: the SDK runs in this process; see [`hosts`]).
    pub sdk_hosts: u32,
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
    /// After the run, drive this many rewards through each stage alone and add each
    /// stage's Redis work per reward to the cost lines ([`crate::stages`]).
    pub stages: Option<u64>,
    /// Requests in flight past which arrivals are shed (and the run stops, invalid).
    pub max_in_flight: u64,
    /// This process's metrics recorder (`--metrics-addr`), scraped at the end into
    /// the run directory beside the children's.
    pub metrics: Option<reward_runtime::admin::PrometheusHandle>,
    /// Where this process serves its metrics, if it does (`--metrics-addr`, or a
    /// loopback port when the stack runs Prometheus): listed for Prometheus.
    pub metrics_served: Option<std::net::SocketAddr>,
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
    /// The run's end-to-end credited/s divided by `raw_producer_per_sec`: how the
    /// whole pipeline compares with a bare producer of single events on the same
    /// machine (filled when the report is built).
    pub end_to_end_vs_raw_producer: f64,
    /// The same, divided by `claim_script_per_sec`.
    pub end_to_end_vs_claim_script: f64,
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
    /// Event send retries so far.
    pub sdk_retries: u64,
    /// Stored tokens the reward service's sweeper granted so far (summed over the
    /// instances, scraped every second).
    pub swept: u64,
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

/// A rate-limited type's achieved rate: credits per second between its first and last
/// credit second (edges left out). While a backlog of the type lasts, the fleet-wide
/// limit is what bounds it, so `per_sec / limit` is the limit's accuracy.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LimitedRate {
    /// The fleet-wide limit, credits/s.
    pub limit: f64,
    /// Credited per second over the span.
    pub per_sec: f64,
    /// Seconds the span covers.
    pub secs: u64,
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
    /// What each type given a limit for this run (`--limit`) was credited at
    /// ([`LimitedRate`]).
    pub limited: BTreeMap<String, LimitedRate>,
    /// Faults injected: (seconds, label).
    pub faults: Vec<(f64, String)>,
    /// Per fault: when it struck, when the part was back, time to recover, cost
    /// ([`recovery`]).
    pub fault_verdicts: Vec<recovery::FaultVerdict>,
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
    /// What the run cost per credited reward ([`crate::cost`]), from the start of
    /// sending to the end of the drain.
    pub cost: Option<crate::cost::Cost>,
    /// The downstream double's counters (runs with a downstream fault): calls, failed
    /// on purpose, answered late after crediting, repeats answered with the first
    /// receipt.
    pub downstream_double: BTreeMap<String, u64>,
    /// Each fault proxy's counters by link (runs with network faults): connections,
    /// resets, bytes forwarded each way, answer bytes dropped.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fault_proxies: BTreeMap<String, BTreeMap<String, u64>>,
}

/// Runs one replay; returns its run directory and report (reconciliation included).
pub async fn run(env: &StackEnv, opts: &ReplayOptions) -> anyhow::Result<(PathBuf, ReplayReport)> {
    let mut run = Run::start(env, opts).await?;
    let collector = run.start_collector();
    let watchers = run.start_watchers();
    let collected = run.play_schedule(collector).await?;
    run.drain(&collected).await?;
    run.measure_cost().await;
    let watched = watchers.stop().await;
    let consumers = run.stop_services().await?;
    let sdk_counters = run.close_sdk().await?;
    let (reconciliation, ceilings) = run.reconcile().await?;
    let stages = match opts.stages {
        Some(n) => match crate::stages::measure_timed(&env.redis_url, n).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("replay: the stage probe failed: {e:#}");
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    let mut report = run.report(
        &collected,
        watched,
        consumers,
        sdk_counters,
        reconciliation,
        ceilings,
    );
    if let Some(cost) = report.cost.as_mut() {
        cost.stages = stages;
    }
    // The run is over: its keys may be cleaned from now on (`loadtest clean`).
    run.end_live().await;
    Ok((run.dir, report))
}
