//! `reward-service`: serves the gRPC grant API and the wallet HTTP API.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use reward_runtime::service::{self, Binary};

/// mimalloc instead of the system allocator: under load glibc's malloc and free take
/// a large share of this process's CPU (docs/allocator.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Credits each trade number exactly once, within budget: gRPC `Grant`, `GrantAsync`,
/// `GrantBatch` for activity services and consumers; HTTP/JSON token validation,
/// reward listing and withdrawal for wallet frontends and the reference wallet page.
///
/// Needs, from the environment (never from the config file):
///   REWARD_SERVICE_TOKEN or REWARD_SERVICE_TOKEN_FILE   the grant credential: gRPC
///                                                       and /metrics (>= 16 bytes)
///   REWARD_WALLET_TOKEN or REWARD_WALLET_TOKEN_FILE     the wallet credential: the
///                                                       wallet HTTP routes only (another
///                                                       value, >= 16 bytes)
///   REWARD_METRICS_TOKEN or REWARD_METRICS_TOKEN_FILE   optional: the credential of
///                                                       /metrics alone (else the grant
///                                                       credential opens it)
///   REWARD_ADMIN_TOKEN or REWARD_ADMIN_TOKEN_FILE       optional: the admin credential,
///                                                       gRPC BudgetAdmin alone (without
///                                                       it that API refuses every call)
///   REWARD_TOKEN_KEYS or REWARD_TOKEN_KEYS_FILE         the token key ring (as the SDK)
///   REWARD_SESSION_KEYS or REWARD_SESSION_KEYS_FILE     optional: the wallet session key
///                                                       ring (else [wallet]
///                                                       session_keys_file); without one,
///                                                       browsers' sessions are refused
/// The wallet page is served at /wallet/ (docs/wallet.md).
/// Overrides: REWARD_SERVICE__SECTION__KEY=value for any config key,
/// REWARD_SDK__SECTION__KEY=value inside the [sdk] section.
/// Stops on SIGTERM or Ctrl-C: calls in flight finish (server.shutdown_grace_ms), then
/// queued events drain to a broker or the spool.
#[derive(Debug, Parser)]
#[command(version, verbatim_doc_comment)]
struct Args {
    /// The service's TOML config (see the crate docs of reward_service::config).
    #[arg(long, env = "REWARD_SERVICE_CONFIG")]
    config: PathBuf,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long)]
    json_logs: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(code) | Err(code) => code,
    }
}

async fn run(args: Args) -> Result<ExitCode, ExitCode> {
    let bin = Binary("reward-service");
    service::init_tracing(args.json_logs);
    let cfg = bin.config(reward_service::config::ServiceConfig::load(&args.config))?;
    let metrics = bin.start(reward_runtime::admin::install_metrics())?;
    let built = bin.start(reward_service::server::build(&cfg).await)?;
    let running =
        bin.start(reward_service::server::serve_with_metrics(built, &cfg, Some(metrics)).await)?;
    println!(
        "reward-service: gRPC on {}, HTTP on {}",
        running.grpc_addr, running.http_addr
    );
    service::stop_signal().await;
    tracing::info!("stopping: finishing calls in flight");
    let report = running.shutdown().await;
    tracing::info!(drained = report.drained, left = report.left, "stopped");
    if report.left > 0 {
        eprintln!(
            "reward-service: {} queued events were neither delivered nor spooled",
            report.left
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
