//! `sdk-host`: an SDK as a load-test replay's activity side (see
//! `reward_standins::sdk_host`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// mimalloc, as in an activity service built for production (docs/allocator.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs an SDK as a replay's activity side (started by `loadtest replay --sdk-hosts`):
/// one JSON request per line on stdin, one answer per line on stdout, the SDK's
/// counters every second; at the end of stdin, closes the SDK and reports its last
/// counters. A malformed line ends the host with an error (the parent fails the run).
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Cli {
    /// The SDK's config (TOML, as the replay writes it in the run directory).
    #[arg(long)]
    config: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    reward_runtime::service::run_tool(async move {
        match reward_standins::sdk_host::serve(&cli.config).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sdk-host FAILED: {e:#}");
                ExitCode::FAILURE
            }
        }
    })
}
