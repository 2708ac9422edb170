//! `loadtest stages`: the pipeline's Redis work per reward, stage by stage
//! ([`crate::stages`]).

use std::process::ExitCode;

/// The arguments of `loadtest stages`.
#[derive(Debug, clap::Args)]
pub struct StagesArgs {
    /// Rewards driven through each stage.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
    rewards: u64,
    /// Redis of the pipeline [default: the stack's, REDIS_URL].
    #[arg(long)]
    redis_url: Option<String>,
    /// Print the figures as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `loadtest stages`: prints one line per stage and their sum.
pub async fn stages_cmd(args: StagesArgs) -> ExitCode {
    let url = args
        .redis_url
        .unwrap_or_else(|| reward_stack::env::StackEnv::from_env().redis_url);
    match crate::stages::measure_timed(&url, args.rewards).await {
        Ok(stages) if args.json => match serde_json::to_string_pretty(&stages) {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("stages FAILED: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(stages) => {
            println!(
                "pipeline redis per reward, each stage alone ({} rewards, {}):",
                args.rewards,
                reward_stack::env::without_credentials(&url)
            );
            for line in crate::stages::lines(&stages) {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("stages FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}
