//! `loadtest replay` (play a peak profile through the stack, reconcile, report) and
//! `loadtest reconcile` (check a finished replay again from its run directory).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use reward_stack::env::StackEnv;

use crate::faults::Fault;
use crate::profile::{Plan, Profile};
use crate::replay::{ReplayOptions, ReplayReport};

/// The arguments of `loadtest replay`. An option given twice takes its last value, so
/// `ops/main --scale 0.004` overrides the script's own `--scale 0.002`.
#[derive(Debug, clap::Args)]
#[command(args_override_self = true)]
pub struct ReplayArgs {
    /// Profile file (loadtest/profiles/{rain,cards,fireworks,overlap}.toml).
    #[arg(long, default_value = "loadtest/profiles/rain.toml")]
    profile: PathBuf,
    /// Multiply every rate and the user count by this (fit to the machine).
    #[arg(long, default_value_t = 0.002)]
    scale: f64,
    /// Play the event's curve over this many seconds [default: the profile's].
    #[arg(long)]
    duration: Option<f64>,
    /// Accepted for older commands: a replay always starts its own reward service and
    /// consumers as child processes (each run has its own topics and key prefixes).
    #[arg(long, hide = true)]
    with_services: bool,
    /// Reward service instances; the consumers balance their GrantBatch calls over
    /// them (a `kill-service` fault kills one with SIGKILL and restarts it).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    services: u32,
    /// Run the activity side (the SDK) in this many child processes, `loadtest
    /// sdk-host`, with requests spread over them; 0 runs the SDK in this process. A
    /// plan with a `kill-sdk-host` fault needs at least 2 (the default it then gets).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=8))]
    sdk_hosts: Option<u32>,
    /// Kafka consumer group members.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    consumers: u32,
    /// RocketMQ consumer group members. At least one: the
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
    #[arg(long = "slo", value_name = "NAME=VALUE", value_parser = crate::slo::parse_override)]
    slo: Vec<(String, String)>,
    /// Fault plan (TOML, see loadtest::faults): kill consumers, stop servers.
    #[arg(long)]
    faults: Option<PathBuf>,
    /// Where run directories are created.
    #[arg(long, default_value = "/var/tmp/reward-loadtest")]
    out: PathBuf,
    /// Requests in flight past which the load tester sheds arrivals; the first shed
    /// stops the schedule and marks the run invalid.
    #[arg(long, default_value_t = crate::replay::MAX_IN_FLIGHT, value_parser = clap::value_parser!(u64).range(1..))]
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
    /// After the run, drive N rewards through each stage of the pipeline alone (token
    /// write, claim, finish, token move) and print each stage's Redis commands and
    /// CPU per reward beside the run's total (run it on a quiet stack).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
    stages: Option<u64>,
    /// Serve this process's /metrics, /healthz, /readyz here while it runs (the
    /// SDK's counters: sends, failovers, spool). The children always serve theirs
    /// on free loopback ports; every process's final scrape is saved in the run
    /// directory as metrics-<name>.prom.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<std::net::SocketAddr>,
}

/// The arguments of `loadtest reconcile`.
#[derive(Debug, clap::Args)]
pub struct ReconcileArgs {
    /// The run directory (printed by `replay`).
    dir: PathBuf,
}

/// Runs `loadtest replay`: plays the profile, reconciles, writes the reports and
/// answers the verdict's exit status (2 for bad arguments).
pub async fn replay_cmd(args: ReplayArgs) -> ExitCode {
    let (mut opts, metrics_addr) = match replay_options(args) {
        Ok(o) => o,
        Err(code) => return code,
    };
    if let Err(code) = attach_metrics(&mut opts, metrics_addr).await {
        return code;
    }
    match crate::replay::run(&StackEnv::from_env(), &opts).await {
        Ok((dir, report)) => finish_replay(&dir, &report),
        Err(e) => {
            println!("replay FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Checks the arguments, loads the plan and the faults, prints the plan's line and
/// answers the run's options (metrics not yet attached) with `--metrics-addr`. On a
/// bad argument it prints why and answers exit status 2.
fn replay_options(args: ReplayArgs) -> Result<(ReplayOptions, Option<SocketAddr>), ExitCode> {
    let ReplayArgs {
        profile,
        scale,
        duration,
        with_services: _,
        services,
        sdk_hosts,
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
        stages,
        metrics_addr,
    } = args;
    check_limits(&limits)?;
    let (plan, faults) = load_plan(&profile, scale, duration, &slo, faults)?;
    let sdk_hosts = crate::faults::sdk_hosts(&faults, sdk_hosts).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })?;
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
        services,
        sdk_hosts,
        kafka_consumers: consumers,
        rocketmq_consumers,
        limits: limits.into_iter().collect(),
        faults,
        drain_secs,
        progress: !quiet,
        partitions,
        stack_script,
        ceilings,
        stages,
        max_in_flight,
        metrics: None,
        metrics_served: None,
    };
    Ok((opts, metrics_addr))
}

/// Refuses a `--limit` on an unknown reward type (printing why; exit status 2).
fn check_limits(limits: &[(String, f64)]) -> Result<(), ExitCode> {
    let known = crate::setup::TYPES.map(|t| t.0);
    if let Some((t, _)) = limits.iter().find(|(t, _)| !known.contains(&t.as_str())) {
        eprintln!(
            "error: --limit {t}: unknown reward type (known: {})",
            known.join(", ")
        );
        return Err(ExitCode::from(2));
    }
    Ok(())
}

/// Loads the profile and fits it to the run (scale, duration, `--slo` overrides),
/// and loads the fault plan if one is given; on an error prints it (exit status 2).
fn load_plan(
    profile: &Path,
    scale: f64,
    duration: Option<f64>,
    slo: &[(String, String)],
    faults: Option<PathBuf>,
) -> Result<(Plan, Vec<Fault>), ExitCode> {
    let mut plan = match Profile::load(profile).and_then(|p| p.plan(scale, duration)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Err(ExitCode::from(2));
        }
    };
    if let Err(e) = crate::slo::apply(&mut plan.slo, slo) {
        eprintln!("error: {e}");
        return Err(ExitCode::from(2));
    }
    let faults = match faults.map(|f| crate::faults::load(&f)).transpose() {
        Ok(f) => f.unwrap_or_default(),
        Err(e) => {
            eprintln!("error: {e:#}");
            return Err(ExitCode::from(2));
        }
    };
    Ok((plan, faults))
}

/// Installs this process's metrics recorder into `opts` (always: the final scrape
/// goes to the run directory) and serves it on `metrics_addr` if given. A recorder
/// that cannot be installed is reported and the run goes on without; an address that
/// cannot be served is printed and answers exit status 2.
async fn attach_metrics(
    opts: &mut ReplayOptions,
    metrics_addr: Option<SocketAddr>,
) -> Result<(), ExitCode> {
    // The recorder is always installed (the final scrape goes to the run
    // directory); the endpoint only with --metrics-addr.
    match reward_runtime::admin::install_metrics() {
        Ok(handle) => {
            // With the stack's Prometheus, served on a loopback port it is told of
            // (loadtest::replay::discovery) when no address was given.
            let served = metrics_addr.or_else(|| {
                crate::replay::discovery::StackPrometheus::find()
                    .map(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
            });
            if let Some(addr) = served {
                let ready: reward_runtime::admin::ReadyCheck =
                    std::sync::Arc::new(|| Box::pin(async { Ok(()) }));
                match reward_runtime::admin::serve(addr, handle.clone(), ready).await {
                    Ok((bound, _)) => {
                        println!("metrics on http://{bound}/metrics");
                        opts.metrics_served = Some(bound);
                    }
                    Err(e) => {
                        eprintln!("error: cannot serve metrics on {addr}: {e}");
                        return Err(ExitCode::from(2));
                    }
                }
            }
            opts.metrics = Some(handle);
        }
        Err(e) => eprintln!("replay: no metrics: {e}"),
    }
    Ok(())
}

/// Prints a finished replay's tables and headline, writes its reports, and answers
/// the exit status its verdict gives.
fn finish_replay(dir: &Path, report: &ReplayReport) -> ExitCode {
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
            c.end_to_end_vs_raw_producer,
            c.claim_script_per_sec,
            c.end_to_end_vs_claim_script,
            c.claim_script_command
        );
    }
    for (t, l) in &report.limited {
        println!(
            "limit {t} {:.0}/s fleet-wide: credited {:.2}/s over {} s between its first and last credit second ({:+.1} %)",
            l.limit,
            l.per_sec,
            l.secs,
            (l.per_sec / l.limit - 1.0) * 100.0
        );
    }
    if !report.fault_verdicts.is_empty() {
        println!(
            "faults: when, what, the part back after, recovered (every reward sent before it was back credited), cost"
        );
        for v in &report.fault_verdicts {
            println!("{}", v.line());
        }
    }
    if report.reconciliation.host_marked > 0 {
        println!(
            "rewards in doubt (accepted by or in flight in a killed SDK host, or refused after a token write's answer was lost): {} events were in a killed host's memory; {} rewards marked, {} of them neither stored nor credited: {} answered, {} unanswered",
            report
                .sdk
                .get("events in memory of a killed SDK host")
                .copied()
                .unwrap_or(0),
            report.reconciliation.host_marked,
            report.reconciliation.lost_with_host,
            report.reconciliation.lost_answered,
            report.reconciliation.lost_unanswered
        );
    }
    if let Some(c) = &report.cost {
        for line in c.lines() {
            println!("{line}");
        }
    }
    match crate::report::write(dir, report) {
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

/// Runs `loadtest reconcile`: prints the run's PASS/FAIL table and answers failure
/// unless it passed.
pub async fn reconcile_cmd(args: ReconcileArgs) -> ExitCode {
    let ReconcileArgs { dir } = args;
    match crate::reconcile::run_patiently(&dir).await {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: super::ReplayArgs,
    }

    #[test]
    fn an_option_given_twice_takes_its_last_value() {
        // ops/main passes --scale and --duration, and its caller may pass them again.
        let cli = Cli::try_parse_from([
            "replay",
            "--scale",
            "0.002",
            "--duration",
            "60",
            "--scale",
            "0.004",
            "--duration",
            "120",
        ])
        .unwrap();
        assert_eq!(cli.args.scale, 0.004);
        assert_eq!(cli.args.duration, Some(120.0));
        assert!(Cli::try_parse_from(["replay", "--sdk-hosts", "9"]).is_err());
    }
}
