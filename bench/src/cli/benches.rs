//! The benchmarks against same-run baselines: `reward-bench send` (SDK vs raw rdkafka),
//! `reward-bench grant` (GrantBatch vs the claim script) and `reward-bench
//! consumer` (consumer vs a bare rdkafka consumer), with their result tables.

use std::process::ExitCode;

use reward_baseline::Percentiles;
use reward_stack::env::StackEnv;

use crate::consumer::{self, ConsumerBenchOptions};
use crate::grant::{self, GrantBenchOptions, GrantCpu};
use crate::send::{self, BenchOptions, BenchReport};

/// The arguments of `reward-bench send`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
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
    /// The paced run's rate, calls per second, instead of half the measured rate: to
    /// compare two runs (two settings, two binaries) at the same offered load.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    paced_rate: Option<u64>,
    /// Throughput rounds (raw then sdk, each on fresh topics).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// A librdkafka setting for both sides, KEY=VALUE (repeatable), laid over the
    /// SDK's defaults and the stack's (e.g. `--kafka-setting linger.ms=50`).
    #[arg(long = "kafka-setting", value_name = "KEY=VALUE", value_parser = parse_setting)]
    kafka_settings: Vec<(String, String)>,
    /// The SDK's token store write mode: `direct` (the SDK's default: each call awaits
    /// its token's write), `batched` (through a writer task) or `deferred` (the call
    /// does not wait for Redis; an opt-in that loses rewards when the process dies);
    /// see the sdk::store docs. Whatever the mode, a reward counts once its token is
    /// stored and its event delivered.
    #[arg(long, default_value = "direct", value_parser = ["direct", "batched", "deferred"])]
    write_mode: String,
    /// Also measure the reward agent: the same SDK in a `reward-agent` child (beside
    /// this binary) called over its Unix socket, one reward a call and
    /// `--agent-batch` a call each round, and paced at the in-process paced rate.
    #[arg(long)]
    agent: bool,
    /// Rewards per SendRewards call in the agent's batch run.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(2..=1000))]
    agent_batch: u64,
}

/// The arguments of `reward-bench grant`.
#[derive(Debug, clap::Args)]
pub struct GrantBenchArgs {
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
    /// The service's `claims.replica_acks`: replicas that must hold each claim before
    /// its credit (a Redis Cluster has 1 per primary); 0 waits for none.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=8))]
    replica_acks: u32,
    /// Also grant as many through a Python client (grpcio, 8 channels, batches of
    /// 100) against the same service: a Python with conformance/requirements.txt
    /// (ops/test makes one: ~/.cache/reward-dispatch/conformance-venv/bin/python).
    #[arg(long, env = "REWARD_CONFORMANCE_PYTHON")]
    python: Option<std::path::PathBuf>,
    /// Keep the built-in ledger (the stand-in wallet) on the pipeline's Redis instead
    /// of the wallet's own (WALLET_REDIS_URL): its credits then load the Redis the
    /// claim script's ceiling is measured on.
    #[arg(long)]
    ledger_on_pipeline_redis: bool,
    /// Rounds, each a service run then a script run (a fresh service and fresh keys
    /// each): every round's figures, then the median ratio and the ratio of the
    /// means. The script side alone swings from one run to the next on a shared
    /// machine, so one round's ratio is a sample, not a figure.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=50))]
    rounds: u32,
}

/// The arguments of `reward-bench consumer`.
#[derive(Debug, clap::Args)]
pub struct ConsumerBenchArgs {
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

/// Runs `reward-bench consumer`: prints both consumers' rates and the ratio;
/// answers failure if the run failed.
pub async fn consumer_bench_cmd(args: ConsumerBenchArgs) -> ExitCode {
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
    match consumer::run(&StackEnv::from_env(), &opts).await {
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
            if let Some(w) = reward_stack::env::fork_warning(r.redis_forks) {
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

/// Runs `reward-bench grant`: prints the service's and the bare script's rates and
/// the ratio; answers failure if the run failed.
pub async fn grant_bench_cmd(args: GrantBenchArgs) -> ExitCode {
    let GrantBenchArgs {
        grants,
        batch,
        concurrency,
        redis_clients,
        pipeline,
        users,
        replica_acks,
        python,
        ledger_on_pipeline_redis,
        rounds,
    } = args;
    let opts = GrantBenchOptions {
        grants,
        batch: usize::try_from(batch).unwrap_or(1000),
        concurrency: usize::try_from(concurrency).unwrap_or(1024),
        redis_clients,
        pipeline,
        users,
        replica_acks,
        python,
        ledger_on_pipeline_redis,
    };
    println!(
        "grant-bench: {grants} grants in batches of {batch}, {concurrency} callers, replica_acks {replica_acks}, ledger on {}, {rounds} round(s)",
        if ledger_on_pipeline_redis {
            "the pipeline's Redis"
        } else {
            "the wallet's Redis"
        }
    );
    let env = StackEnv::from_env();
    let mut done: Vec<grant::GrantBenchReport> = Vec::new();
    for round in 1..=rounds {
        if rounds > 1 {
            println!("== round {round} of {rounds}");
        }
        match grant::run(&env, &opts).await {
            Ok(r) => {
                print_grant_round(&r);
                done.push(r);
            }
            Err(e) => {
                println!("grant-bench FAILED in round {round}: {e:#}");
                if done.len() > 1 {
                    print_grant_rounds(&done);
                }
                return ExitCode::FAILURE;
            }
        }
    }
    if done.len() > 1 {
        print_grant_rounds(&done);
    }
    ExitCode::SUCCESS
}

/// One round of `reward-bench grant`: the service's rate and batch latency, the
/// script's, their ratio, the Python client's when asked, and a fork warning.
fn print_grant_round(r: &grant::GrantBenchReport) {
    println!("service GrantBatch   {:>10.0} grants/s", r.service_rate);
    println!(
        "  batch latency us   p50 {} p99 {} p99.9 {} max {} ({} calls)",
        r.batch_latency.p50,
        r.batch_latency.p99,
        r.batch_latency.p999,
        r.batch_latency.max,
        r.batch_latency.count
    );
    let c = r.service_cpu;
    let us = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
    println!(
        "  CPU us per grant   this process (clients and service) {}, pipeline Redis {}, wallet Redis {}",
        us(c.process_us),
        us(c.redis_us),
        us(c.wallet_us)
    );
    if r.script_rate > 0.0 {
        println!(
            "claim script alone   {:>10.0} EVALSHA/s, p99 {:.3} ms, Redis CPU {} us per call",
            r.script_rate,
            r.script_p99_ms,
            us(r.script_redis_us)
        );
        println!("  ({})", r.script_command);
        println!("ratio service/script {:>10.2}", r.ratio());
    } else {
        println!("claim script alone   not run: {}", r.script_command);
    }
    if let Some(p) = &r.python {
        let rate = p["rate"].as_f64().unwrap_or(0.0);
        println!(
            "Python client        {rate:>10.0} grants/s (grpcio, 8 channels x batches of 100, no proofs), batch p50 {} ms p99 {} ms; python/rust {:.2}",
            p["batch_p50_ms"],
            p["batch_p99_ms"],
            rate / r.service_rate
        );
    }
    if let Some(w) = reward_stack::env::fork_warning(r.redis_forks) {
        println!("{w}");
    }
}

/// The rounds together: each side's rates, the median ratio and the ratio of the
/// means (the script side not run on a cluster: service rates only).
fn print_grant_rounds(rounds: &[grant::GrantBenchReport]) {
    let list = |f: &dyn Fn(&grant::GrantBenchReport) -> f64| {
        rounds
            .iter()
            .map(|r| format!("{:.0}", f(r)))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let mean = |f: &dyn Fn(&grant::GrantBenchReport) -> f64| {
        rounds.iter().map(f).sum::<f64>() / rounds.len() as f64
    };
    println!("== {} rounds", rounds.len());
    println!(
        "service GrantBatch   {} grants/s (mean {:.0})",
        list(&|r| r.service_rate),
        mean(&|r| r.service_rate)
    );
    let cpu = |f: &dyn Fn(&GrantCpu) -> Option<f64>| {
        let v: Vec<f64> = rounds.iter().filter_map(|r| f(&r.service_cpu)).collect();
        if v.is_empty() {
            "-".to_string()
        } else {
            format!("{:.1}", v.iter().sum::<f64>() / v.len() as f64)
        }
    };
    println!(
        "  CPU us per grant, mean: this process {}, pipeline Redis {}, wallet Redis {}",
        cpu(&|c| c.process_us),
        cpu(&|c| c.redis_us),
        cpu(&|c| c.wallet_us)
    );
    if rounds.iter().all(|r| r.script_rate > 0.0) {
        println!(
            "claim script alone   {} EVALSHA/s (mean {:.0})",
            list(&|r| r.script_rate),
            mean(&|r| r.script_rate)
        );
        let mut ratios: Vec<f64> = rounds.iter().map(grant::GrantBenchReport::ratio).collect();
        ratios.sort_by(f64::total_cmp);
        let n = ratios.len();
        let median = if n % 2 == 1 {
            ratios[n / 2]
        } else {
            (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0
        };
        println!(
            "ratio service/script median {median:.2} (rounds {:.2}-{:.2}), of the means {:.2}",
            ratios[0],
            ratios[n - 1],
            mean(&|r| r.service_rate) / mean(&|r| r.script_rate)
        );
    }
}

/// Runs `reward-bench send`: prints each round's rates, the sdk/raw ratio and the paced
/// latencies; answers failure if the run failed.
pub async fn bench_cmd(args: BenchArgs) -> ExitCode {
    let BenchArgs {
        rewards,
        concurrency,
        partitions,
        latency_secs,
        paced_rate,
        rounds,
        kafka_settings,
        write_mode,
        agent,
        agent_batch,
    } = args;
    let opts = BenchOptions {
        rewards,
        concurrency: usize::try_from(concurrency).unwrap_or(usize::MAX),
        partitions,
        latency_secs,
        paced_rate,
        rounds,
        kafka_settings: kafka_settings.into_iter().collect(),
        write_mode,
        agent,
        agent_batch: usize::try_from(agent_batch).unwrap_or(1000),
    };
    match send::run(&StackEnv::from_env(), &opts).await {
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

/// Prints a `reward-bench send` report: the rounds' table, the paced run's latencies and
/// Redis's fork warning if any.
fn print_bench(r: &BenchReport) {
    let pct = |p: &Percentiles| format!("{} / {} / {} / {}", p.p50, p.p99, p.p999, p.max);
    println!(
        "{:<6} {:<12} {:>10} {:>10} {:>12}  call latency us (p50 / p99 / p99.9 / max)",
        "round", "run", "events", "secs", "events/s"
    );
    for (i, round) in r.rounds.iter().enumerate() {
        let mut runs = vec![("raw rdkafka", &round.raw), ("send_reward", &round.sdk)];
        if let Some(a) = &round.agent {
            runs.push(("agent call", a));
        }
        if let Some(b) = &round.agent_batch {
            runs.push(("agent batch", b));
        }
        for (name, t) in runs {
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
        let of_sdk = |t: &reward_baseline::Throughput| t.rate() / round.sdk.rate().max(1e-9);
        if let (Some(a), Some(b)) = (&round.agent, &round.agent_batch) {
            println!(
                "{:<6} agent/in-process: calls {:.2}, batches {:.2} (target >= 0.8)",
                i + 1,
                of_sdk(a),
                of_sdk(b)
            );
        }
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
    if let (Some(p), Some(a)) = (&r.paced, &r.agent_paced) {
        println!(
            "paced SendReward through the agent: asked {:.0}/s, got {:.0}/s, {} calls, {} refused",
            a.target_rate, a.achieved_rate, a.latency.count, a.refused,
        );
        for (what, l) in [("from schedule", &a.latency), ("call", &a.call)] {
            println!(
                "  latency us {what:<13}: p50 {} p99 {} p99.9 {} max {}",
                l.p50, l.p99, l.p999, l.max
            );
        }
        println!(
            "  agent vs in-process, from schedule: p50 {:+} us (target <= +500), p99 x{:.2} (target <= 1.5)",
            a.latency.p50 as i64 - p.latency.p50 as i64,
            a.latency.p99 as f64 / (p.latency.p99 as f64).max(1.0),
        );
    }
    if let Some(w) = reward_stack::env::fork_warning(r.redis_forks) {
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

/// The arguments of `reward-bench audit`.
#[derive(Debug, clap::Args)]
pub struct AuditBenchArgs {
    /// Claim records in the store.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=50_000_000))]
    claims: u64,
    /// The claim store's shards.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    shards: u32,
    /// The audit's pace, Redis reads a second: each key a SCAN page looks at, each
    /// record read and each token check counts one, so a granted claim costs about 3
    /// (0: as fast as Redis answers; the audit's own default is 50 000).
    #[arg(long, default_value_t = 0)]
    keys_per_sec: u64,
}

/// `reward-bench audit`.
pub async fn audit_bench_cmd(args: AuditBenchArgs) -> ExitCode {
    let opts = crate::audit::AuditBenchOptions {
        claims: args.claims,
        shards: args.shards,
        keys_per_sec: args.keys_per_sec,
    };
    match crate::audit::run(&StackEnv::from_env(), &opts).await {
        Ok(r) => {
            let secs = r.took.as_secs_f64();
            println!(
                "audit of {} claim records: {:.2} s wall ({:.0} records/s, {:.2} us each); Redis CPU {:.2} s ({:.2} us a record)",
                r.read,
                secs,
                r.read as f64 / secs.max(1e-9),
                secs * 1e6 / r.read.max(1) as f64,
                r.redis_cpu_secs,
                r.redis_cpu_secs * 1e6 / r.read.max(1) as f64
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("audit-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
