//! `reward-bench smoke`: probes each server of the local stack through its real client
//! library and prints one line per server.

use std::process::ExitCode;
use std::time::Duration;

use reward_stack::env::StackEnv;

use crate::smoke::rocketmq::{ConsumerKind, ProbeOptions};
use crate::smoke::{self, ProbeReport};

/// The arguments of `reward-bench smoke`.
#[derive(Debug, clap::Args)]
pub struct SmokeArgs {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Target {
    Redis,
    Kafka,
    Rocketmq,
}

/// Runs `reward-bench smoke`: probes the chosen servers, prints a line for each and
/// answers failure if any probe failed.
pub async fn smoke_cmd(args: SmokeArgs) -> ExitCode {
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
            "Kafka broker",
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
