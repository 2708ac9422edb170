//! `reward-consumer`: reads reward events from a topic group and credits them through
//! the reward service, within each reward type's rate.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use clap::Parser;
use reward_consumer::Running;
use reward_runtime::service::{self, Binary};

/// mimalloc instead of the system allocator: under load glibc's malloc and free take
/// a large share of this process's CPU (docs/allocator.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The valve between the queue and the reward service: reads reward events from a
/// Kafka consumer group, holds each reward type to its rate (global and per type,
/// changed live through the shared dynamic config, e.g.
/// `ops/config set limits.types.coupon.rate 500`), credits them with GrantBatch,
/// parks retries in a Redis delay queue, and dead-letters what cannot be credited.
/// Offsets are committed only up to the first message still in flight, so a crash
/// re-delivers, never skips.
///
/// Needs, from the environment (never from the config file):
///   REWARD_SERVICE_TOKEN or REWARD_SERVICE_TOKEN_FILE   the reward service's bearer
///                                                       credential (>= 16 bytes)
///   REWARD_TOKEN_KEYS or REWARD_TOKEN_KEYS_FILE         the SDK's token key ring
///                                                       (unless [sdk.token] keys_file)
/// Overrides: REWARD_CONSUMER__SECTION__KEY=value for any config key,
/// REWARD_SDK__SECTION__KEY=value inside the [sdk] section.
/// Stops on SIGTERM or Ctrl-C: fetching stops, work in flight gets
/// pipeline.shutdown_grace_ms, offsets are committed, requeues drain to a broker or the
/// spool. Exit status: 0 clean, 1 if anything was left, 2 for a bad config.
#[derive(Debug, Parser)]
#[command(version, verbatim_doc_comment)]
struct Args {
    /// The consumer's TOML config (see the crate docs of reward_consumer::config).
    #[arg(long, env = "REWARD_CONSUMER_CONFIG")]
    config: PathBuf,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long)]
    json_logs: bool,
    /// Print a progress line (counters and messages in flight) this often; 0 = never.
    #[arg(long, default_value_t = 10)]
    progress_secs: u64,
    /// Keep the counters (and messages in flight) as one JSON object in this file,
    /// rewritten every --stats-ms and at exit (the load tester reads it). The file is
    /// replaced whole (write, then rename), so a reader never sees half of it.
    #[arg(long, value_name = "PATH")]
    stats_file: Option<PathBuf>,
    /// Serve /metrics (Prometheus), /healthz and /readyz on this address (e.g.
    /// 127.0.0.1:9101; no credential, keep it on loopback or an operations network).
    /// /readyz answers 200 once the group has assigned this member a partition.
    #[arg(long, env = "REWARD_CONSUMER_METRICS_ADDR", value_name = "HOST:PORT")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// How often to rewrite --stats-file, milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..))]
    stats_ms: u64,
}

/// Writes the counters to `path` through a temporary file beside it.
fn write_stats(
    path: &std::path::Path,
    stats: &reward_consumer::pipeline::StatsSnapshot,
    in_flight: usize,
    assigned: usize,
    done: bool,
) {
    let body = serde_json::json!({
        "stats": stats,
        "in_flight": in_flight,
        "assigned": assigned,
        "stopped": done,
    });
    let tmp = path.with_extension("tmp");
    let written = std::fs::write(&tmp, body.to_string()).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "cannot write the stats file");
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(code) | Err(code) => code,
    }
}

async fn run(args: Args) -> Result<ExitCode, ExitCode> {
    let bin = Binary("reward-consumer");
    service::init_tracing(args.json_logs);
    let cfg = bin.config(reward_consumer::config::ConsumerConfig::load(&args.config))?;
    // The recorder goes in before anything counts: the pipeline registers its metric
    // handles when it starts, and a handle made earlier would count into nothing.
    let metrics = match args.metrics_addr {
        Some(_) => Some(bin.start(reward_runtime::admin::install_metrics())?),
        None => None,
    };
    if metrics.is_some() {
        // Described, and registered at 0 so a first event shows in rate()
        // (reward_runtime::catalogue); the SDK it links registers its own at start.
        use reward_runtime::catalogue::{self, Component};
        for c in [Component::Consumer, Component::Redis, Component::Config] {
            catalogue::register(c);
        }
        catalogue::zero_counter(
            "reward_consumer_granted_total",
            "type",
            cfg.limits.types.keys().map(String::as_str),
        );
        metrics::gauge!("reward_consumer_assigned_partitions").set(0.0);
    }
    let running = bin.start(reward_consumer::start(&cfg).await)?;
    let assigned = Arc::new(AtomicUsize::new(0));
    if let (Some(addr), Some(handle)) = (args.metrics_addr, metrics) {
        // A Kafka member is ready once the group gave it partitions; RocketMQ's push
        // consumer keeps its queue assignment to itself, so it is ready once started.
        let kafka = matches!(
            cfg.source,
            reward_consumer::config::SourceConfig::Kafka { .. }
        );
        serve_admin(addr, handle, assigned.clone(), kafka).await?;
    }
    println!("reward-consumer: started");
    tokio::select! {
        () = service::stop_signal() => {}
        () = progress(&running, args.progress_secs) => {}
        () = keep_stats_file(&running, args.stats_file.as_deref(), args.stats_ms) => {}
        () = track_assigned(&running, &assigned) => {}
    }
    tracing::info!("stopping: finishing work in flight");
    let report = running.shutdown().await;
    println!(
        "reward-consumer: stopped: {}",
        serde_json::to_string(&report.stats).unwrap_or_default()
    );
    if let Some(path) = &args.stats_file {
        write_stats(path, &report.stats, report.unsettled, 0, true);
    }
    if report.unsettled > 0 || report.sdk_left > 0 || !report.closed {
        eprintln!(
            "reward-consumer: {} messages unsettled (re-delivered to the next owner), {} requeues not on a broker, consumer closed: {}",
            report.unsettled, report.sdk_left, report.closed
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Serves /metrics, /healthz and /readyz (a Kafka member: ready once a partition is
/// assigned; RocketMQ: once started).
async fn serve_admin(
    addr: std::net::SocketAddr,
    handle: reward_runtime::admin::PrometheusHandle,
    assigned: Arc<AtomicUsize>,
    kafka: bool,
) -> Result<(), ExitCode> {
    let ready: reward_runtime::admin::ReadyCheck = Arc::new(move || {
        let n = assigned.load(Ordering::Relaxed);
        Box::pin(async move {
            if n > 0 || !kafka {
                Ok(())
            } else {
                Err("no partitions assigned yet".to_string())
            }
        })
    });
    match reward_runtime::admin::serve(addr, handle, ready).await {
        Ok((bound, _)) => {
            println!("reward-consumer: metrics on http://{bound}/metrics");
            Ok(())
        }
        Err(e) => {
            eprintln!("reward-consumer: cannot serve metrics on {addr}: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// Prints a progress line every `secs` (never when 0).
async fn progress(running: &Running, secs: u64) {
    if secs == 0 {
        return std::future::pending().await;
    }
    let mut tick = tokio::time::interval(Duration::from_secs(secs));
    tick.tick().await;
    loop {
        tick.tick().await;
        let s = running.stats();
        println!(
            "reward-consumer: progress consumed={} granted={} duplicates={} in_flight={} requeued_failed={} requeued_limited={} requeued_fused={} dead_lettered={} last_resort={}",
            s.consumed,
            s.granted,
            s.duplicates,
            running.in_flight(),
            s.requeued_failed,
            s.requeued_limited,
            s.requeued_fused,
            s.dead_lettered,
            s.last_resort
        );
    }
}

/// Rewrites the stats file every `ms` (never without a path).
async fn keep_stats_file(running: &Running, path: Option<&std::path::Path>, ms: u64) {
    let Some(path) = path else {
        return std::future::pending().await;
    };
    let mut tick = tokio::time::interval(Duration::from_millis(ms));
    loop {
        tick.tick().await;
        write_stats(
            path,
            &running.stats(),
            running.in_flight(),
            running.assigned(),
            false,
        );
    }
}

/// Keeps the assigned-partition count (readiness, gauge) fresh.
async fn track_assigned(running: &Running, assigned: &AtomicUsize) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        let n = running.assigned();
        assigned.store(n, Ordering::Relaxed);
        metrics::gauge!("reward_consumer_assigned_partitions").set(n as f64);
    }
}
