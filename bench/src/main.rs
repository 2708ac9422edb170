//! `reward-bench`: the benchmarks against same-run baselines and the stack's smoke
//! probes (see the crate's docs).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use reward_bench::cli::benches::{
    AuditBenchArgs, BenchArgs, ConsumerBenchArgs, GrantBenchArgs, audit_bench_cmd, bench_cmd,
    consumer_bench_cmd, grant_bench_cmd,
};
use reward_bench::cli::smoke::{SmokeArgs, smoke_cmd};

/// mimalloc, as in the binaries it measures (docs/allocator.md): a benchmark of the
/// SDK or the services runs them in this process.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Measures the pipeline's parts against baselines run in the same process, back to
/// back, on the local stack (`ops/stack up`), and probes the stack's servers.
///
/// Server addresses come from REDIS_URL, KAFKA_BROKERS and ROCKETMQ_NAMESRV
/// (`eval "$(ops/stack env)"`), with the stack's loopback defaults (ops/stack.ports).
/// Figures and their history: BENCHMARKS.md, docs/findings/.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Cli {
    /// Record no metrics. By default the process installs the Prometheus recorder the
    /// binaries install (reward_runtime::admin::install_metrics), so what it measures
    /// pays for the metrics as a deployment does; with this flag every metric is a
    /// no-op, and two runs with and without it give the metrics' cost.
    #[arg(long, global = true)]
    no_metrics: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure `send_reward` against a raw rdkafka producer sending the same payloads
    /// with the same settings, in this process, back to back; then `send_reward`'s
    /// latency when paced at half the rate it reached. Needs Redis and the Kafka
    /// broker. Prints rates, the sdk/raw ratio and latency percentiles; exits non-zero
    /// if any run lost, refused or failed to deliver an event. The SDK takes the
    /// `REWARD_SDK__SECTION__KEY` overrides of any SDK, e.g.
    /// `REWARD_SDK__STORE__ANSWER_FROM_QUEUE=false`.
    Send(BenchArgs),
    /// Measure the reward service's `GrantBatch` (served in this process over gRPC on
    /// loopback, config ops/reward-service.toml with fresh keys) against
    /// `redis-benchmark` running the bare claim script by EVALSHA on the same Redis,
    /// back to back. Prints grants/s, batch latency, the script's rate and the ratio;
    /// exits non-zero if any grant was not granted or the budget or ledger disagree.
    Grant(GrantBenchArgs),
    /// Measure the consumer (in this process, ops/consumer.toml with the cash limit
    /// out of the way, crediting through a reward service also in this process)
    /// against a bare rdkafka consumer that only reads and stores offsets, on the same
    /// freshly filled topic, back to back. Prints both rates and the ratio; exits
    /// non-zero unless every event was credited exactly once.
    Consumer(ConsumerBenchArgs),
    /// Prove every server works: write N items through each real client library,
    /// read every one back, check exact counts, print rates. Exits non-zero on any
    /// failure, naming the server and the command that starts it.
    Smoke(SmokeArgs),
    /// Measure the live audit (`reward-ctl audit`) on a store of N claim records
    /// written for it (consistent: every record granted with a receipt, each shard's
    /// budget spent exactly): wall time and Redis CPU, in all and per record. Needs a
    /// single Redis; exits non-zero unless the audit read every record and found
    /// nothing. The keys are removed afterwards.
    Audit(AuditBenchArgs),
    /// Measure what the metrics an accepted `send_reward` records cost a call, in ns:
    /// run it twice, with and without --no-metrics, and compare (no servers needed).
    MetricCost {
        /// Calls per thread.
        #[arg(long, default_value_t = 5_000_000)]
        calls: u64,
        /// Threads recording at once (the SDK's callers on every core).
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !cli.no_metrics
        && let Err(e) = reward_runtime::admin::install_metrics()
    {
        eprintln!("reward-bench: {e}");
        return ExitCode::FAILURE;
    }
    eprintln!(
        "reward-bench: metrics {}",
        if cli.no_metrics {
            "off (--no-metrics)"
        } else {
            "recorded, as in the binaries"
        }
    );
    let no_metrics = cli.no_metrics;
    reward_runtime::service::run_tool(async {
        match cli.command {
            Command::Send(args) => bench_cmd(args).await,
            Command::Grant(args) => grant_bench_cmd(args).await,
            Command::Consumer(args) => consumer_bench_cmd(args).await,
            Command::Smoke(args) => smoke_cmd(args).await,
            Command::Audit(args) => audit_bench_cmd(args).await,
            Command::MetricCost { calls, threads } => {
                let ns = reward_bench::metric_cost::run(calls, threads);
                println!(
                    "metric-cost: {ns:.1} ns a call ({calls} calls x {threads} threads, metrics {})",
                    if no_metrics { "off" } else { "recorded" }
                );
                ExitCode::SUCCESS
            }
        }
    })
}
