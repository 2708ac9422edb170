//! `reward-agent`: the SDK behind a gRPC service for a host's activity services.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use reward_runtime::service::{self, Binary};

/// mimalloc, as in every binary of the pipeline (docs/allocator.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Sends rewards for the activity services of this host, in any language: gRPC
/// `reward.v1.RewardAgent` (SendReward, SendRewards, Health) on a Unix socket, and
/// optionally on loopback TCP with a credential. A reward is answered once it is
/// durable (its token stored, or its event with a broker or in the spool); the
/// contract is in docs/api.md, the clients in clients/.
///
/// Needs, from the environment (never from the config file):
///   REWARD_TOKEN_KEYS or REWARD_TOKEN_KEYS_FILE   the token key ring (as every SDK;
///                                                 or [sdk.token] keys_file)
///   REWARD_AGENT_TOKEN or REWARD_AGENT_TOKEN_FILE with [listen] tcp only: the TCP
///                                                 callers' credential (>= 16 bytes)
/// Overrides: REWARD_AGENT__SECTION__KEY=value for any config key,
/// REWARD_SDK__SECTION__KEY=value inside the [sdk] section.
/// Stops on SIGTERM or Ctrl-C: new rewards are refused CLOSING, calls in flight
/// finish, queued events drain to a broker or the spool, within [drain] timeout_ms.
/// Exit status: 0 stopped cleanly; 1 could not start, or stopped with events or
/// token writes left; 2 the configuration was refused.
#[derive(Debug, Parser)]
#[command(version, verbatim_doc_comment)]
struct Args {
    /// The agent's TOML config (see the crate docs of reward_agent::config).
    #[arg(long, env = "REWARD_AGENT_CONFIG")]
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
    let bin = Binary("reward-agent");
    service::init_tracing(args.json_logs);
    let cfg = bin.config(reward_agent::AgentConfig::load(&args.config))?;
    let metrics = bin.start(reward_runtime::admin::install_metrics())?;
    let running = bin.start(reward_agent::start(cfg, None, Some(metrics)).await)?;
    let tcp = running
        .tcp_addr
        .map(|a| format!(", TCP on {a}"))
        .unwrap_or_default();
    let admin = running
        .admin_addr
        .map(|a| format!(", admin on http://{a}"))
        .unwrap_or_default();
    println!(
        "reward-agent: serving on {}{tcp}{admin}",
        running.socket.display()
    );
    service::stop_signal().await;
    tracing::info!("stopping: refusing new rewards, finishing calls in flight");
    let report = running.shutdown().await;
    tracing::info!(?report, "stopped");
    if report.events_left > 0 || report.tokens_left > 0 || report.calls_cut {
        eprintln!(
            "reward-agent: stopped with {} events neither delivered nor spooled, {} token writes unanswered{}",
            report.events_left,
            report.tokens_left,
            if report.calls_cut {
                ", calls cut at the drain bound"
            } else {
                ""
            }
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
