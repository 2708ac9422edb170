//! `loadtest`: drive the local stack and report what it did.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use loadtest::bench::{self, BenchOptions, BenchReport, Percentiles};
use loadtest::consumer_bench::{self, ConsumerBenchOptions};
use loadtest::grant_bench::{self, GrantBenchOptions};
use loadtest::profile::Profile;
use loadtest::replay::{self, ReplayOptions};
use loadtest::smoke::rocketmq::{ConsumerKind, ProbeOptions};
use loadtest::smoke::{self, ProbeReport};
use reward_tools::stack::StackEnv;

/// mimalloc instead of the system allocator: under load glibc's malloc and free took
/// about a third of this process's CPU (docs/allocator.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Replays reward traffic through the local stack (`ops/stack up`) and reports.
///
/// Server addresses come from REDIS_URL, KAFKA_BROKERS and ROCKETMQ_NAMESRV
/// (`eval "$(ops/stack env)"`), with the stack's loopback defaults.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a peak-traffic profile end to end through the real SDK (open-model
    /// arrivals), wait until every reward is credited, reconcile, and write
    /// report.json and report.html into the run directory.
    ///
    /// Every run is judged three ways: money (the reconciliation), SLOs (tokens
    /// stored, send_reward p99, end-to-end p99: the profile's [slo] targets, --slo
    /// overrides) and validity (the load tester kept to its schedule). Exit status:
    ///   0  money, SLOs passed, run valid
    ///   1  money failed, or the run could not be made
    ///   3  money passed, an SLO failed
    ///   4  money passed, the run was invalid (the machine could not generate the load)
    ///
    /// Every run gets fresh Redis key prefixes, topics and consumer groups (a tag), so
    /// runs never see each other's data. With --with-services the reward service and
    /// the consumers run as child processes (the binaries beside this one) and are
    /// stopped at the end; their logs are in the run directory.
    #[command(verbatim_doc_comment)]
    Replay(ReplayArgs),
    /// Reconcile a finished replay from its run directory: every sent trade number
    /// credited exactly once with its amount, nothing extra, no double credit, budgets
    /// equal to credits, tokens credited or pending. Prints a PASS/FAIL table; exits
    /// non-zero on FAIL.
    Reconcile(ReconcileArgs),
    /// Remove what replays and benches left in Redis (see loadtest::clean). Replays
    /// keep their keys so that `reconcile DIR` can run again; the ledger's keys never
    /// expire, so old runs pile up and slow the stack (AOF rewrites, memory).
    ///
    /// `clean DIR...` removes those replays' keys and marks their manifests cleaned.
    /// `clean --leftovers` counts the keys of every replay and bench run ever made on
    /// this Redis; add --yes to remove them (and mark the run directories under --out
    /// as cleaned). Topics are left to the brokers' retention.
    #[command(verbatim_doc_comment)]
    Clean(CleanArgs),
    /// Prove every server works: write N items through each real client library,
    /// read every one back, check exact counts, print rates. Exits non-zero on any
    /// failure, naming the server and the command that starts it.
    Smoke(SmokeArgs),
    /// Measure `send_reward` against a raw rdkafka producer sending the same payloads
    /// with the same settings, in this process, back to back; then `send_reward`'s
    /// latency when paced at half the rate it reached. Needs Redis and the Kafka
    /// broker. Prints rates, the sdk/raw ratio and latency percentiles; exits non-zero
    /// if any run lost, refused or failed to deliver an event.
    Bench(BenchArgs),
    /// Measure the reward service's `GrantBatch` (served in this process over gRPC on
    /// loopback, config ops/reward-service.toml with fresh keys) against
    /// `redis-benchmark` running the bare claim script by EVALSHA on the same Redis,
    /// back to back. Prints grants/s, batch latency, the script's rate and the ratio;
    /// exits non-zero if any grant was not granted or the budget or ledger disagree.
    GrantBench(GrantBenchArgs),
    /// Measure the consumer (in this process, ops/consumer.toml with the cash limit
    /// out of the way, crediting through a reward service also in this process)
    /// against a bare rdkafka consumer that only reads and stores offsets, on the same
    /// freshly filled topic, back to back. Prints both rates and the ratio; exits
    /// non-zero unless every event was credited exactly once.
    ConsumerBench(ConsumerBenchArgs),
}

/// The arguments of `loadtest replay`.
#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// Profile file (loadtest/profiles/{rain,cards,fireworks,overlap}.toml).
    #[arg(long, default_value = "loadtest/profiles/rain.toml")]
    profile: PathBuf,
    /// Multiply every rate and the user count by this (fit to the machine).
    #[arg(long, default_value_t = 0.002)]
    scale: f64,
    /// Play the event's curve over this many seconds [default: the profile's].
    #[arg(long)]
    duration: Option<f64>,
    /// Start the reward service and consumers as child processes.
    #[arg(long)]
    with_services: bool,
    /// Kafka consumer group members (with --with-services).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    consumers: u32,
    /// RocketMQ consumer group members (with --with-services). At least one: the
    /// `special` queue (coupons) has RocketMQ as its primary, and the `massive`
    /// queue fails over to it.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    rocketmq_consumers: u32,
    /// A consumer rate limit for the run, TYPE=CREDITS_PER_SEC (repeatable), e.g.
    /// `--limit coupon=50` to watch the valve hold.
    #[arg(long = "limit", value_name = "TYPE=RATE", value_parser = parse_limit)]
    limits: Vec<(String, f64)>,
    /// Override one SLO target for this run, NAME=VALUE (repeatable): tokens_stored
    /// (share, e.g. 0.999), send_p99_ms, end_to_end_p99_ms (a number or `off`),
    /// start_lag_p99_ms (the validity bound, a number).
    #[arg(long = "slo", value_name = "NAME=VALUE", value_parser = loadtest::slo::parse_override)]
    slo: Vec<(String, String)>,
    /// Fault plan (TOML, see loadtest::faults): kill consumers, stop servers.
    #[arg(long)]
    faults: Option<PathBuf>,
    /// Where run directories are created.
    #[arg(long, default_value = "/var/tmp/reward-loadtest")]
    out: PathBuf,
    /// Requests in flight past which the load tester sheds arrivals; the first shed
    /// stops the schedule and marks the run invalid.
    #[arg(long, default_value_t = loadtest::replay::MAX_IN_FLIGHT, value_parser = clap::value_parser!(u64).range(1..))]
    max_in_flight: u64,
    /// Stop waiting for credits after this many seconds without progress.
    #[arg(long, default_value_t = 60)]
    drain_secs: u64,
    /// Partitions per Kafka topic.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(i32).range(1..=256))]
    partitions: i32,
    /// The stack script fault drills call.
    #[arg(long, default_value = "ops/stack")]
    stack_script: PathBuf,
    /// No progress bars (logs and CI).
    #[arg(long)]
    quiet: bool,
    /// After the run, measure the parts' ceilings on the same stack (a bare
    /// rdkafka producer; redis-benchmark of the claim script) and print the
    /// end-to-end rate as a share of each (release build for figures).
    #[arg(long)]
    ceilings: bool,
    /// Serve this process's /metrics, /healthz, /readyz here while it runs (the
    /// SDK's counters: sends, failovers, spool). The children always serve theirs
    /// on free loopback ports; every process's final scrape is saved in the run
    /// directory as metrics-<name>.prom.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<std::net::SocketAddr>,
}

/// The arguments of `loadtest reconcile`.
#[derive(Debug, clap::Args)]
struct ReconcileArgs {
    /// The run directory (printed by `replay`).
    dir: PathBuf,
}

/// The arguments of `loadtest clean`.
#[derive(Debug, clap::Args)]
struct CleanArgs {
    /// Replay run directories (each holds manifest.json).
    #[arg(required_unless_present = "leftovers", conflicts_with = "leftovers")]
    dirs: Vec<PathBuf>,
    /// Every run's keys of every load-tester key family, not only some runs'.
    #[arg(long)]
    leftovers: bool,
    /// With --leftovers: remove them (without it, only count).
    #[arg(long)]
    yes: bool,
    /// Only count what would be removed.
    #[arg(long)]
    dry_run: bool,
    /// Redis for --leftovers [default: the stack's, REDIS_URL].
    #[arg(long)]
    redis_url: Option<String>,
    /// With --leftovers --yes: the run directories whose manifests to mark cleaned.
    #[arg(long, default_value = "/var/tmp/reward-loadtest")]
    out: PathBuf,
}

/// The arguments of `loadtest smoke`.
#[derive(Debug, clap::Args)]
struct SmokeArgs {
    /// Items per server (Redis hash fields, Kafka messages, RocketMQ messages).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    messages: u64,
    /// Probe only these servers (repeatable); default: all.
    #[arg(long, value_enum)]
    only: Vec<Target>,
    /// RocketMQ consumer type to use.
    #[arg(long, value_enum, default_value_t = ConsumerKind::Push)]
    rocketmq_consumer: ConsumerKind,
    /// RocketMQ: messages per pull request [default: 256].
    #[arg(long)]
    pull_batch: Option<u32>,
    /// RocketMQ push consumer: consume threads [default: 4].
    #[arg(long)]
    consume_threads: Option<u32>,
    /// RocketMQ push consumer: messages per listener call [default: 32].
    #[arg(long)]
    consume_batch: Option<u32>,
    /// RocketMQ: leave every consumer knob not given on the command line at the
    /// client library's own default (to reproduce its behaviour).
    #[arg(long)]
    library_defaults: bool,
    /// RocketMQ: messages per send_batch call.
    #[arg(long, default_value_t = 100)]
    send_batch: usize,
    /// Kafka: librdkafka debug contexts for the probe's consumers, e.g.
    /// `cgrp,broker,fetch` (its `debug` setting). The lines are logged under the
    /// target `librdkafka`: run with `RUST_LOG=librdkafka=debug` to see them.
    #[arg(long, value_name = "CONTEXTS")]
    kafka_debug: Option<String>,
}

/// The arguments of `loadtest bench`.
#[derive(Debug, clap::Args)]
struct BenchArgs {
    /// Rewards per throughput run.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=50_000_000))]
    rewards: u64,
    /// Concurrent `send_reward` callers.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    concurrency: u64,
    /// Partitions of each topic.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(i32).range(1..=1024))]
    partitions: i32,
    /// Seconds of paced `send_reward` calls at half the measured rate (0: skip).
    #[arg(long, default_value_t = 10)]
    latency_secs: u64,
    /// Throughput rounds (raw then sdk, each on fresh topics).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// A librdkafka setting for both sides, KEY=VALUE (repeatable), laid over the
    /// SDK's defaults and the stack's (e.g. `--kafka-setting linger.ms=50`).
    #[arg(long = "kafka-setting", value_name = "KEY=VALUE", value_parser = parse_setting)]
    kafka_settings: Vec<(String, String)>,
    /// The SDK's token store write mode: `deferred` (the SDK's default: the call
    /// does not wait for Redis at all), `direct` (each call awaits its script call)
    /// or `batched` (through a writer task); see the sdk::store docs.
    #[arg(long, default_value = "deferred", value_parser = ["direct", "batched", "deferred"])]
    write_mode: String,
}

/// The arguments of `loadtest grant-bench`.
#[derive(Debug, clap::Args)]
struct GrantBenchArgs {
    /// Grants through the service.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=50_000_000))]
    grants: u64,
    /// Events per GrantBatch call.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=1000))]
    batch: u64,
    /// Concurrent gRPC callers (one connection each).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1024))]
    concurrency: u64,
    /// redis-benchmark connections (-c).
    #[arg(long, default_value_t = 50)]
    redis_clients: u32,
    /// redis-benchmark calls per round trip (-P).
    #[arg(long, default_value_t = 16)]
    pipeline: u32,
    /// Users the grants are spread over.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    users: u64,
}

/// The arguments of `loadtest consumer-bench`.
#[derive(Debug, clap::Args)]
struct ConsumerBenchArgs {
    /// Events on the topic.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=50_000_000))]
    messages: u64,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(i32).range(1..=256))]
    partitions: i32,
    /// Users the events are spread over.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    users: u64,
    /// GrantBatch calls the consumer keeps in flight (its pipeline.concurrency).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1024))]
    concurrency: u64,
    /// Events per GrantBatch call at most (its pipeline.batch; the service takes up
    /// to its server.max_batch, 1 000 in ops/reward-service.toml). Default: the
    /// value in ops/consumer.toml.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    batch: Option<u64>,
    /// A librdkafka setting for both consumers, KEY=VALUE (repeatable), over the
    /// consumer's fetch defaults, which the bare consumer gets too (e.g.
    /// `--consumer-setting fetch.wait.max.ms=500`).
    #[arg(long = "consumer-setting", value_name = "KEY=VALUE", value_parser = parse_setting)]
    consumer_settings: Vec<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Target {
    Redis,
    Kafka,
    Rocketmq,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(run(cli));
    // A client library thread stuck in its own shutdown (see the Kafka probe's close
    // deadline) must not keep the process from exiting with its verdict.
    runtime.shutdown_timeout(Duration::from_secs(5));
    code
}

async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Replay(args) => replay_cmd(args).await,
        Command::Clean(args) => clean_cmd(args).await,
        Command::Reconcile(args) => reconcile_cmd(args).await,
        Command::ConsumerBench(args) => consumer_bench_cmd(args).await,
        Command::GrantBench(args) => grant_bench_cmd(args).await,
        Command::Bench(args) => bench_cmd(args).await,
        Command::Smoke(args) => smoke_cmd(args).await,
    }
}

async fn replay_cmd(args: ReplayArgs) -> ExitCode {
    let ReplayArgs {
        profile,
        scale,
        duration,
        with_services,
        consumers,
        rocketmq_consumers,
        limits,
        slo,
        faults,
        out,
        max_in_flight,
        drain_secs,
        partitions,
        stack_script,
        quiet,
        ceilings,
        metrics_addr,
    } = args;
    if !with_services {
        // Each run has its own topics and key prefixes (so reconciliation reads
        // only its own data); services started elsewhere would not read them.
        eprintln!(
            "error: replay needs --with-services for now: every run uses its own topics and Redis key prefixes, which a reward service and consumers started elsewhere do not know"
        );
        return ExitCode::from(2);
    }
    let known = loadtest::setup::TYPES.map(|t| t.0);
    if let Some((t, _)) = limits.iter().find(|(t, _)| !known.contains(&t.as_str())) {
        eprintln!(
            "error: --limit {t}: unknown reward type (known: {})",
            known.join(", ")
        );
        return ExitCode::from(2);
    }
    let mut plan = match Profile::load(&profile).and_then(|p| p.plan(scale, duration)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = loadtest::slo::apply(&mut plan.slo, &slo) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let faults = match faults.map(|f| loadtest::faults::load(&f)).transpose() {
        Ok(f) => f.unwrap_or_default(),
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    println!(
        "replay {}: {:.0} s, peak {:.0}/s, ~{:.0} requests, {} users",
        plan.name,
        plan.duration_secs,
        plan.peak_rate(),
        plan.expected_sends(),
        plan.users
    );
    let opts = ReplayOptions {
        plan,
        out,
        with_services,
        kafka_consumers: consumers,
        rocketmq_consumers,
        limits: limits.into_iter().collect(),
        faults,
        drain_secs,
        progress: !quiet,
        partitions,
        stack_script,
        ceilings,
        max_in_flight,
        metrics: None,
    };
    let mut opts = opts;
    // The recorder is always installed (the final scrape goes to the run
    // directory); the endpoint only with --metrics-addr.
    match reward_runtime::admin::install_metrics() {
        Ok(handle) => {
            if let Some(addr) = metrics_addr {
                let ready: reward_runtime::admin::ReadyCheck =
                    std::sync::Arc::new(|| Box::pin(async { Ok(()) }));
                match reward_runtime::admin::serve(addr, handle.clone(), ready).await {
                    Ok((bound, _)) => println!("metrics on http://{bound}/metrics"),
                    Err(e) => {
                        eprintln!("error: cannot serve metrics on {addr}: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
            opts.metrics = Some(handle);
        }
        Err(e) => eprintln!("replay: no metrics: {e}"),
    }
    match replay::run(&StackEnv::from_env(), &opts).await {
        Ok((dir, report)) => finish_replay(&dir, &report),
        Err(e) => {
            println!("replay FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a finished replay's tables and headline, writes its reports, and answers
/// the exit status its verdict gives.
fn finish_replay(dir: &std::path::Path, report: &replay::ReplayReport) -> ExitCode {
    print!("{}", report.reconciliation.table());
    println!(
        "sent {} ({:.0}/s), credited {} ({:.0}/s over {:.1} s, peak {}/s); send p99 {} us; end-to-end p50 {} ms p99 {} ms",
        report.sent,
        report.sent_per_sec,
        report.credited,
        report.credited_per_sec,
        report.span_secs,
        report.credited_peak_per_sec,
        report.send_latency_us.p99,
        report.end_to_end_ms.p50,
        report.end_to_end_ms.p99
    );
    if let Some(c) = &report.ceilings {
        println!(
            "ceilings: raw rdkafka producer {:.0}/s (end-to-end = {:.3} of it); claim script alone {:.0}/s (end-to-end = {:.3} of it)\n  ({})",
            c.raw_producer_per_sec,
            report.credited_per_sec / c.raw_producer_per_sec,
            c.claim_script_per_sec,
            report.credited_per_sec / c.claim_script_per_sec,
            c.claim_script_command
        );
    }
    match loadtest::report::write(dir, report) {
        Ok(html) => println!("report: {}", html.display()),
        Err(e) => {
            println!("replay: cannot write the report: {e:#}");
            return ExitCode::FAILURE;
        }
    }
    println!(
        "replay: reconciliation {}",
        if report.reconciliation.passed() {
            "PASS"
        } else {
            "FAIL"
        }
    );
    print!("{}", report.verdict.table());
    println!("replay: {}", report.verdict.headline);
    ExitCode::from(report.verdict.exit_code())
}

async fn clean_cmd(args: CleanArgs) -> ExitCode {
    let CleanArgs {
        dirs,
        leftovers,
        yes,
        dry_run,
        redis_url,
        out,
    } = args;
    match clean(
        &dirs,
        leftovers.then_some(out.as_path()),
        dry_run || (leftovers && !yes),
        redis_url,
    )
    .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("clean FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn reconcile_cmd(args: ReconcileArgs) -> ExitCode {
    let ReconcileArgs { dir } = args;
    match loadtest::reconcile::run(&dir).await {
        Ok(r) => {
            print!("{}", r.table());
            if r.passed() {
                println!("reconcile: PASS");
                ExitCode::SUCCESS
            } else {
                println!("reconcile: FAIL");
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            println!("reconcile FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn consumer_bench_cmd(args: ConsumerBenchArgs) -> ExitCode {
    let ConsumerBenchArgs {
        messages,
        partitions,
        users,
        concurrency,
        batch,
        consumer_settings,
    } = args;
    let opts = ConsumerBenchOptions {
        messages,
        partitions,
        users,
        concurrency: usize::try_from(concurrency).unwrap_or(1024),
        batch: batch.and_then(|b| usize::try_from(b).ok()),
        consumer_settings,
    };
    println!("consumer-bench: {messages} events, {partitions} partitions");
    match consumer_bench::run(&StackEnv::from_env(), &opts).await {
        Ok(r) => {
            println!("                           from start     steady   to first message");
            for (name, t) in [
                ("raw rdkafka (read + store)", r.raw),
                ("consumer (credited)       ", r.consumer),
            ] {
                println!(
                    "{name} {:>8.0}/s {:>8.0}/s {:>10.0} ms",
                    t.from_start,
                    t.steady,
                    t.to_first.as_secs_f64() * 1000.0
                );
            }
            println!(
                "ratio consumer/raw         {:>10.2} {:>10.2}   (target >= 0.8)",
                r.ratio(),
                r.steady_ratio()
            );
            println!("  {:?}", r.stats);
            if let Some(w) = reward_tools::stack::fork_warning(r.redis_forks) {
                println!("{w}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("consumer-bench FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn grant_bench_cmd(args: GrantBenchArgs) -> ExitCode {
    let GrantBenchArgs {
        grants,
        batch,
        concurrency,
        redis_clients,
        pipeline,
        users,
    } = args;
    let opts = GrantBenchOptions {
        grants,
        batch: usize::try_from(batch).unwrap_or(1000),
        concurrency: usize::try_from(concurrency).unwrap_or(1024),
        redis_clients,
        pipeline,
        users,
    };
    println!("grant-bench: {grants} grants in batches of {batch}, {concurrency} callers");
    match grant_bench::run(&StackEnv::from_env(), &opts).await {
        Ok(r) => {
            println!("service GrantBatch   {:>10.0} grants/s", r.service_rate);
            println!(
                "  batch latency us   p50 {} p99 {} p99.9 {} max {} ({} calls)",
                r.batch_latency.p50,
                r.batch_latency.p99,
                r.batch_latency.p999,
                r.batch_latency.max,
                r.batch_latency.count
            );
            println!(
                "claim script alone   {:>10.0} EVALSHA/s, p99 {:.3} ms",
                r.script_rate, r.script_p99_ms
            );
            println!("  ({})", r.script_command);
            println!("ratio service/script {:>10.2}", r.ratio());
            if let Some(w) = reward_tools::stack::fork_warning(r.redis_forks) {
                println!("{w}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("grant-bench FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn bench_cmd(args: BenchArgs) -> ExitCode {
    let BenchArgs {
        rewards,
        concurrency,
        partitions,
        latency_secs,
        rounds,
        kafka_settings,
        write_mode,
    } = args;
    let opts = BenchOptions {
        rewards,
        concurrency: usize::try_from(concurrency).unwrap_or(usize::MAX),
        partitions,
        latency_secs,
        rounds,
        kafka_settings: kafka_settings.into_iter().collect(),
        write_mode,
    };
    match bench::run(&StackEnv::from_env(), &opts).await {
        Ok(report) => {
            print_bench(&report);
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("bench FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn smoke_cmd(args: SmokeArgs) -> ExitCode {
    let SmokeArgs {
        messages,
        only,
        rocketmq_consumer,
        pull_batch,
        consume_threads,
        consume_batch,
        send_batch,
        kafka_debug,
        library_defaults,
    } = args;
    let env = StackEnv::from_env();
    let wanted = |t| only.is_empty() || only.contains(&t);
    let mut failed = 0;
    println!(
        "{:<22} {:>8} {:>8} {:>5} {:>12} {:>12}  detail",
        "server", "written", "read", "dups", "write/s", "read/s"
    );
    let mut show = |r: Result<ProbeReport, smoke::SmokeError>, name: &str| match r {
        Ok(r) => println!(
            "{:<22} {:>8} {:>8} {:>5} {:>12.0} {:>12.0}  {}",
            r.server.to_string(),
            r.written,
            r.read_back,
            r.duplicates,
            r.write_rate(),
            r.read_rate(),
            r.detail
        ),
        Err(e) => {
            failed += 1;
            println!("{name:<22} FAILED: {e}");
        }
    };
    if wanted(Target::Redis) {
        show(smoke::redis::probe(&env, messages).await, "Redis");
    }
    if wanted(Target::Kafka) {
        show(
            smoke::kafka::probe_with(
                &env,
                &smoke::kafka::KafkaProbeOptions {
                    messages,
                    debug: kafka_debug.clone(),
                    ..smoke::kafka::KafkaProbeOptions::default()
                },
            )
            .await,
            "Kafka broker (tansu)",
        );
    }
    if wanted(Target::Rocketmq) {
        let base = ProbeOptions::new(messages);
        let pick = |given: Option<u32>, ours: Option<u32>| {
            given.or(if library_defaults { None } else { ours })
        };
        let opts = ProbeOptions {
            consumer: rocketmq_consumer,
            pull_batch: pick(pull_batch, base.pull_batch),
            consume_threads: pick(consume_threads, base.consume_threads),
            consume_batch: pick(consume_batch, base.consume_batch),
            send_batch,
            consume_timeout: Duration::from_secs(120).max(Duration::from_millis(messages / 5)),
            ..base
        };
        show(smoke::rocketmq::probe(&env, &opts).await, "RocketMQ");
    }
    if failed == 0 {
        println!("smoke: every server passed");
        ExitCode::SUCCESS
    } else {
        println!("smoke: {failed} server(s) failed");
        ExitCode::FAILURE
    }
}

fn print_bench(r: &BenchReport) {
    let pct = |p: &Percentiles| format!("{} / {} / {} / {}", p.p50, p.p99, p.p999, p.max);
    println!(
        "{:<6} {:<12} {:>10} {:>10} {:>12}  call latency us (p50 / p99 / p99.9 / max)",
        "round", "run", "events", "secs", "events/s"
    );
    for (i, round) in r.rounds.iter().enumerate() {
        for (name, t) in [("raw rdkafka", &round.raw), ("send_reward", &round.sdk)] {
            println!(
                "{:<6} {:<12} {:>10} {:>10.3} {:>12.0}  {}",
                i + 1,
                name,
                t.events,
                t.elapsed.as_secs_f64(),
                t.rate(),
                pct(&t.calls)
            );
        }
        println!(
            "{:<6} sdk/raw ratio {:.2} (target >= 0.9)",
            i + 1,
            round.ratio()
        );
    }
    if let Some(p) = &r.paced {
        println!(
            "paced send_reward: asked {:.0}/s, got {:.0}/s, {} calls, {} refused (target p99 <= 1000 us)",
            p.target_rate, p.achieved_rate, p.latency.count, p.refused,
        );
        for (what, l) in [("from schedule", &p.latency), ("call", &p.call)] {
            println!(
                "  latency us {what:<13}: p50 {} p99 {} p99.9 {} max {}",
                l.p50, l.p99, l.p999, l.max
            );
        }
    }
    if let Some(w) = reward_tools::stack::fork_warning(r.redis_forks) {
        println!("{w}");
    }
}

/// `KEY=VALUE`, both sides non-empty (librdkafka itself judges the key and value).
fn parse_setting(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => {
            Ok((k.trim().to_string(), v.trim().to_string()))
        }
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// `TYPE=RATE` with a positive rate.
fn parse_limit(s: &str) -> Result<(String, f64), String> {
    let (t, r) = s
        .split_once('=')
        .ok_or_else(|| format!("expected TYPE=RATE, got {s:?}"))?;
    let rate: f64 = r
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: the rate must be a number"))?;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("{s:?}: the rate must be > 0"));
    }
    Ok((t.trim().to_string(), rate))
}

/// `loadtest clean` (see the subcommand's help).
/// `leftovers`: every run's keys, and the run directories under this path to mark.
async fn clean(
    dirs: &[PathBuf],
    leftovers: Option<&std::path::Path>,
    dry_run: bool,
    redis_url: Option<String>,
) -> anyhow::Result<()> {
    use loadtest::clean::{BENCH_FAMILIES, REPLAY_FAMILIES, Selection};
    let (url, sel) = if leftovers.is_some() {
        let url = match redis_url {
            Some(u) => u,
            None => reward_tools::stack::StackEnv::from_env().redis_url,
        };
        let families = REPLAY_FAMILIES
            .iter()
            .chain(BENCH_FAMILIES.iter())
            .map(|f| f.to_string())
            .collect();
        (url, Selection::AnyRun { families })
    } else {
        let dirs: Vec<&std::path::Path> = dirs.iter().map(PathBuf::as_path).collect();
        loadtest::clean::replay_runs(&dirs)?
    };
    let bar = indicatif::ProgressBar::new_spinner();
    let done = loadtest::clean::clean(&url, &sel, dry_run, |scanned, matched| {
        bar.set_message(format!("{scanned} keys scanned, {matched} matched"));
        bar.tick();
    })
    .await?;
    bar.finish_and_clear();
    if dry_run {
        println!(
            "clean: {} keys would be removed (nothing removed{})",
            done.matched,
            if leftovers.is_some() {
                "; add --yes"
            } else {
                ""
            }
        );
        return Ok(());
    }
    println!("clean: {} keys removed", done.removed);
    if let Some(out) = leftovers {
        let marked =
            loadtest::clean::mark_runs_cleaned(out, &url, reward_runtime::clock::now_ms())?;
        println!(
            "clean: {} run directories under {} marked cleaned",
            marked.len(),
            out.display()
        );
    }
    for dir in dirs {
        let mut m = loadtest::setup::Manifest::load(dir)?;
        m.cleaned_unix_ms = Some(reward_runtime::clock::now_ms());
        m.save(dir)?;
    }
    Ok(())
}
