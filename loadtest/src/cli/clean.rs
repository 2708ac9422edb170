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
                let env = reward_stack::env::StackEnv::from_env();
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
    // A DIR still running is refused before anything is touched (its keys would be
    // left alone below anyway, but its manifest must not be marked).
    if let Selection::Runs { tags, .. } = &sel {
        let live = reward_tools::clean::live_marks(&url, tags).await?;
        if !live.is_empty() {
            anyhow::bail!(
                "nothing cleaned: {} still running; clean again once it has ended",
                describe_live(&live)
            );
        }
    }
    // The run directories a --leftovers clean may mark: those there before it began.
    let unmarked_before = match leftovers {
        Some(out) => crate::clean::unmarked_tags(out, &url)?,
        None => std::collections::BTreeSet::new(),
    };
    let bar = indicatif::ProgressBar::new_spinner();
    // Runs mark themselves live on every Redis they write to
    // (`reward_tools::clean::LiveRun`): a live run's keys are left alone on each, and
    // the tags found live on the first are kept on the second, so a run that ends
    // between the two keeps both halves.
    let none = std::collections::BTreeSet::new();
    let mut done =
        reward_tools::clean::clean(&url, &sel, dry_run, Some(&none), |scanned, matched| {
            bar.set_message(format!("{scanned} keys scanned, {matched} matched"));
            bar.tick();
        })
        .await?;
    // The ledgers' keys, on the wallet's own Redis.
    for other in also.iter().filter(|u| **u != url) {
        let known = done.live.keys().cloned().collect();
        let more =
            reward_tools::clean::clean(other, &sel, dry_run, Some(&known), |scanned, matched| {
                bar.set_message(format!("wallet: {scanned} keys scanned, {matched} matched"));
                bar.tick();
            })
            .await?;
        done.matched += more.matched;
        done.removed += more.removed;
        for (t, h) in more.live {
            let e = done.live.entry(t).or_default();
            if e.is_empty() {
                *e = h;
            }
        }
    }
    bar.finish_and_clear();
    if !done.live.is_empty() {
        println!(
            "clean: left alone the keys of {} still running (each holds a live mark, ltlive-TAG, that lapses {} s after its process stops)",
            describe_live(&done.live),
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
        // Only runs seen before the clean, less those still running (a run that had
        // written nothing yet when the pages were read is live too).
        let unmarked = unmarked_before;
        let mut live: std::collections::BTreeSet<String> = done.live.keys().cloned().collect();
        live.extend(
            reward_tools::clean::live_marks(&url, &unmarked)
                .await?
                .into_keys(),
        );
        let take = unmarked.difference(&live).cloned().collect();
        let marked =
            crate::clean::mark_runs_cleaned(out, &url, &take, reward_runtime::clock::now_ms())?;
        println!(
            "clean: {} run directories under {} marked cleaned",
            marked.len(),
            out.display()
        );
    }
    for dir in dirs {
        let mut m = crate::setup::Manifest::load(dir)?;
        if done.live.contains_key(&m.tag) {
            continue;
        }
        m.cleaned_unix_ms = Some(reward_runtime::clock::now_ms());
        m.save(dir)?;
    }
    Ok(())
}

/// `TAG (pid N on HOST), …` for the live runs `live` (tag -> holder).
fn describe_live(live: &std::collections::BTreeMap<String, String>) -> String {
    let runs: Vec<String> = live
        .iter()
        .map(|(t, h)| {
            if h.is_empty() {
                format!("run {t}")
            } else {
                format!("run {t} ({h})")
            }
        })
        .collect();
    runs.join(", ")
}
