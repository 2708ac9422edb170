//! `loadtest clean`: removes the Redis keys that replays and benches leave behind and
//! marks the cleaned runs' manifests.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The arguments of `loadtest clean`.
#[derive(Debug, clap::Args)]
pub struct CleanArgs {
    /// Replay run directories (each holds manifest.json).
    #[arg(required_unless_present = "leftovers", conflicts_with = "leftovers")]
    dirs: Vec<PathBuf>,
    /// Every run's keys of every load-tester key family, not only some runs'. A run
    /// still running (its process keeps a live mark) is left alone, here and with DIRs.
    #[arg(long)]
    leftovers: bool,
    /// With --leftovers: remove them (without it, only count).
    #[arg(long)]
    yes: bool,
    /// Only count what would be removed.
    #[arg(long)]
    dry_run: bool,
    /// Redis for --leftovers [default: the stack's, REDIS_URL, and its wallet's,
    /// WALLET_REDIS_URL, where replays keep their ledgers].
    #[arg(long)]
    redis_url: Option<String>,
    /// With --leftovers --yes: the run directories whose manifests to mark cleaned.
    #[arg(long, default_value = "/var/tmp/reward-loadtest")]
    out: PathBuf,
}

/// Runs `loadtest clean`: answers success once the keys are removed (or counted) and
/// the manifests marked, failure after printing why not.
pub async fn clean_cmd(args: CleanArgs) -> ExitCode {
    let CleanArgs {
        dirs,
        leftovers,
        yes,
        dry_run,
        redis_url,
        out,
    } = args;
    match clean(
        &dirs,
        leftovers.then_some(out.as_path()),
        dry_run || (leftovers && !yes),
        redis_url,
    )
    .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("clean FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `loadtest clean` (see the subcommand's help).
/// `leftovers`: every run's keys, and the run directories under this path to mark.
async fn clean(
    dirs: &[PathBuf],
    leftovers: Option<&Path>,
    dry_run: bool,
    redis_url: Option<String>,
) -> anyhow::Result<()> {
    use reward_tools::clean::{BENCH_FAMILIES, REPLAY_FAMILIES, Selection};
    let (url, sel, also) = if leftovers.is_some() {
        let (url, also) = match redis_url {
            Some(u) => (u, Vec::new()),
            None => {
                let env = reward_tools::stack::StackEnv::from_env();
                (env.redis_url, vec![env.wallet_redis_url])
            }
        };
        let families = REPLAY_FAMILIES
            .iter()
            .chain(BENCH_FAMILIES.iter())
            .map(|f| f.to_string())
            .collect();
        (url, Selection::AnyRun { families }, also)
    } else {
        let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
        let (url, sel) = crate::clean::replay_runs(&dirs)?;
        (url, sel, crate::clean::ledger_urls(&dirs)?)
    };
    let bar = indicatif::ProgressBar::new_spinner();
    // Runs mark themselves live on the Redis they write their claims and tokens to
    // (`reward_tools::clean::LiveRun`): a live run's keys are left alone, here and on
    // its wallet's Redis.
    let mut done =
        reward_tools::clean::clean(&url, &sel, dry_run, Some(&url), |scanned, matched| {
            bar.set_message(format!("{scanned} keys scanned, {matched} matched"));
            bar.tick();
        })
        .await?;
    // The ledgers' keys, on the wallet's own Redis.
    for other in also.iter().filter(|u| **u != url) {
        let more =
            reward_tools::clean::clean(other, &sel, dry_run, Some(&url), |scanned, matched| {
                bar.set_message(format!("wallet: {scanned} keys scanned, {matched} matched"));
                bar.tick();
            })
            .await?;
        done.matched += more.matched;
        done.removed += more.removed;
        done.live.extend(more.live);
    }
    bar.finish_and_clear();
    if !done.live.is_empty() {
        println!(
            "clean: left alone the keys of {} run(s) still running: {} (each holds a live mark, ltlive-TAG, that lapses {} s after its process stops)",
            done.live.len(),
            done.live.iter().cloned().collect::<Vec<_>>().join(", "),
            reward_tools::clean::LIVE_TTL.as_secs()
        );
    }
    if dry_run {
        println!(
            "clean: {} keys would be removed (nothing removed{})",
            done.matched,
            if leftovers.is_some() {
                "; add --yes"
            } else {
                ""
            }
        );
        return Ok(());
    }
    println!("clean: {} keys removed", done.removed);
    if let Some(out) = leftovers {
        let marked = crate::clean::mark_runs_cleaned(
            out,
            &url,
            &done.live,
            reward_runtime::clock::now_ms(),
        )?;
        println!(
            "clean: {} run directories under {} marked cleaned",
            marked.len(),
            out.display()
        );
    }
    for dir in dirs {
        let mut m = crate::setup::Manifest::load(dir)?;
        if done.live.contains(&m.tag) {
            continue;
        }
        m.cleaned_unix_ms = Some(reward_runtime::clock::now_ms());
        m.save(dir)?;
    }
    Ok(())
}
