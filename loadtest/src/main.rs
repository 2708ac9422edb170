//! `loadtest`: drive the local stack and report what it did.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use loadtest::cli::clean::{CleanArgs, clean_cmd};
use loadtest::cli::replay::{ReconcileArgs, ReplayArgs, reconcile_cmd, replay_cmd};
use loadtest::cli::stages::{StagesArgs, stages_cmd};
use loadtest::cli::wallet::{WalletArgs, wallet_cmd};

/// mimalloc instead of the system allocator: under load glibc's malloc and free take
/// a large share of this process's CPU (docs/allocator.md).
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
    /// runs never see each other's data. The reward service and the consumers run as
    /// child processes (the binaries beside this one) and are stopped at the end; their
    /// logs are in the run directory.
    #[command(verbatim_doc_comment)]
    Replay(ReplayArgs),
    /// Reconcile a finished replay from its run directory: every sent trade number
    /// credited exactly once with its amount, nothing extra, no double credit, budgets
    /// equal to credits, tokens credited or pending. Prints a PASS/FAIL table; exits
    /// non-zero on FAIL.
    Reconcile(ReconcileArgs),
    /// Remove what replays and benches left in Redis (see reward_tools::clean). Replays
    /// keep their keys so that `reconcile DIR` can run again; the ledger's keys never
    /// expire, so old runs pile up and slow the stack (AOF rewrites, memory).
    ///
    /// `clean DIR...` removes those replays' keys and marks their manifests cleaned.
    /// `clean --leftovers` counts the keys of every replay and bench run ever made on
    /// this Redis; add --yes to remove them (and mark the run directories under --out
    /// as cleaned). Topics are left to the brokers' retention.
    /// A run still running (a replay, a bench, a `loadtest wallet` on a run) marks
    /// itself live, `ltlive-TAG` naming its process, until it ends or 60 s after it
    /// died: its keys are left alone and named, and `clean DIR` of it is refused.
    #[command(verbatim_doc_comment)]
    Clean(CleanArgs),
    /// Serve the wallet page of one of a replay's users: starts a reward service on
    /// the run's config, mints a wallet session for the user (default: the one who won
    /// the most) and prints the page's URL; serves until Ctrl-C. `ops/main --wallet`
    /// runs it after the replay.
    Wallet(WalletArgs),
    /// Drive rewards through each stage of the pipeline alone (token write, claim,
    /// finish, token move: the library calls the services make) against the pipeline's
    /// Redis, and print each stage's Redis commands, script calls and server CPU per
    /// reward. Keys go under bench prefixes and are removed after. Run it on a quiet
    /// stack: Redis's CPU counts every client.
    Stages(StagesArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    reward_runtime::service::run_tool(run(cli))
}

async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Replay(args) => replay_cmd(args).await,
        Command::Clean(args) => clean_cmd(args).await,
        Command::Wallet(args) => wallet_cmd(args).await,
        Command::Stages(args) => stages_cmd(args).await,
        Command::Reconcile(args) => reconcile_cmd(args).await,
    }
}
