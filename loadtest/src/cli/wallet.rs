//! `loadtest wallet`: after a replay, the wallet page of one of its users, to look at.
//!
//! Starts a reward service on the run's own config (its key prefixes, token keys and
//! credentials, all in the run directory), mints a wallet session for one user of the
//! run (by default the one who won the most rewards) and prints the page's URL with
//! the session in its fragment. The service serves until Ctrl-C or SIGTERM.
//!
//! The session keys are made once per run directory (`session-keys`, mode 0600) and
//! never printed; the URL's session names one user and one activity and expires after
//! `--ttl-secs`. A run whose keys `loadtest clean` removed is refused: its page would
//! be empty.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::services::{Child, Spec};
use crate::setup::Manifest;

/// The arguments of `loadtest wallet`.
#[derive(Debug, clap::Args)]
pub struct WalletArgs {
    /// A replay's run directory [default: the newest under --out that is not cleaned].
    dir: Option<PathBuf>,
    /// Where run directories are (for the default).
    #[arg(long, default_value = "/var/tmp/reward-loadtest")]
    out: PathBuf,
    /// The user whose wallet to show [default: the run's user with the most rewards].
    #[arg(long)]
    user: Option<String>,
    /// How long the session in the URL stays good, seconds (1..=86400).
    #[arg(long, default_value_t = 1800, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    ttl_secs: u64,
    /// The address the page is served on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: std::net::SocketAddr,
}

/// Runs `loadtest wallet`: success after a clean stop, failure after printing why the
/// page could not be served.
pub async fn wallet_cmd(args: WalletArgs) -> ExitCode {
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wallet FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The newest run directory under `out` whose keys are still in Redis.
fn newest_run(out: &Path) -> anyhow::Result<PathBuf> {
    let entries = std::fs::read_dir(out)
        .map_err(|e| anyhow::anyhow!("no replay runs in {}: {e}", out.display()))?;
    let mut runs: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("sent.tsv").is_file() && p.join("service.toml").is_file())
        .filter(|p| Manifest::load(p).is_ok_and(|m| m.cleaned_unix_ms.is_none()))
        .filter_map(|p| Some((p.join("manifest.json").metadata().ok()?.modified().ok()?, p)))
        .collect();
    runs.sort();
    runs.pop().map(|(_, p)| p).ok_or_else(|| {
        anyhow::anyhow!(
            "no replay run with its keys still in Redis under {}; run ops/main first",
            out.display()
        )
    })
}

/// The user to show and their activity and reward count.
fn pick_user(dir: &Path, wanted: Option<&str>) -> anyhow::Result<(String, String, usize)> {
    let (sent, _, _) = crate::reconcile::read_sent(dir)?;
    let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for r in sent.values() {
        *counts
            .entry((r.user_id.as_str(), r.activity_id.as_str()))
            .or_default() += 1;
    }
    let found = match wanted {
        Some(u) => counts
            .iter()
            .filter(|((user, _), _)| *user == u)
            .max_by_key(|(_, n)| **n),
        None => counts.iter().max_by_key(|(_, n)| **n),
    };
    let ((user, activity), n) = found.ok_or_else(|| match wanted {
        Some(u) => anyhow::anyhow!("user {u:?} won nothing in the run {}", dir.display()),
        None => anyhow::anyhow!("the run {} sent no rewards", dir.display()),
    })?;
    Ok((user.to_string(), activity.to_string(), *n))
}

/// The run's session key ring, made on first use.
fn session_keys(dir: &Path) -> anyhow::Result<(PathBuf, sdk::session::SessionCodec)> {
    let path = dir.join("session-keys");
    if !path.is_file() {
        crate::setup::write_secret(&path, sdk::token::KeyRing::random(1).to_text().as_bytes())?;
    }
    let ring = sdk::token::KeyRing::from_file(&path, None)
        .map_err(|e| anyhow::anyhow!("session keys: {e}"))?;
    Ok((path, sdk::session::SessionCodec::new(ring)))
}

async fn serve(args: WalletArgs) -> anyhow::Result<()> {
    let dir = match args.dir {
        Some(d) => d,
        None => newest_run(&args.out)?,
    };
    let manifest = Manifest::load(&dir)?;
    if manifest.cleaned_unix_ms.is_some() {
        anyhow::bail!(
            "the run {} was cleaned (`loadtest clean`): its rewards are no longer in Redis",
            dir.display()
        );
    }
    // Its service's sweeper writes into the run's keys: the run is live while it serves.
    let _live = reward_tools::clean::LiveRun::hold(
        &[&manifest.redis_url, manifest.ledger_redis()],
        &manifest.tag,
    )
    .await?;
    let (user, activity, won) = pick_user(&dir, args.user.as_deref())?;
    let (keys, codec) = session_keys(&dir)?;
    let spec = Spec {
        name: "wallet-service".into(),
        program: crate::services::bin_dir().join("reward-service"),
        args: vec![
            "--config".into(),
            dir.join("service.toml").display().to_string(),
        ],
        env: vec![
            (
                "REWARD_SERVICE_TOKEN_FILE".into(),
                dir.join("credential").display().to_string(),
            ),
            (
                "REWARD_WALLET_TOKEN_FILE".into(),
                dir.join("wallet-credential").display().to_string(),
            ),
            (
                sdk::session::KEYS_FILE_ENV.into(),
                keys.display().to_string(),
            ),
            (
                "REWARD_SERVICE__SERVER__HTTP_ADDR".into(),
                args.addr.to_string(),
            ),
            (
                "REWARD_SERVICE__SERVER__GRPC_ADDR".into(),
                "127.0.0.1:0".into(),
            ),
        ],
        log: dir.join("wallet-service.log"),
        ready_line: "reward-service: gRPC on ".into(),
    };
    eprintln!("wallet: starting a reward service on {}", dir.display());
    let child = Child::start(spec, Duration::from_secs(60)).await?;
    let http = child
        .ready
        .rsplit_once("HTTP on ")
        .map(|(_, a)| a.trim().to_string())
        .ok_or_else(|| anyhow::anyhow!("the service did not say its HTTP address"))?;
    let now = u64::try_from(reward_runtime::clock::now_ms()).unwrap_or(0);
    let session = codec
        .mint(&user, &activity, Duration::from_secs(args.ttl_secs), now)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "wallet of user {user} in {activity} ({won} rewards in the run), good for {} s:",
        args.ttl_secs
    );
    println!("  http://{http}/wallet/#session={session}");
    println!(
        "(the service's log: {}; Ctrl-C stops it)",
        dir.join("wallet-service.log").display()
    );
    reward_runtime::service::stop_signal().await;
    eprintln!("wallet: stopping the service");
    child.stop(Duration::from_secs(15)).await;
    Ok(())
}
