//! Removing what load-test runs leave in Redis: the replays' and the benches' keys,
//! by key family and run tag (`loadtest clean`, and the benches' own clean-up).
//!
//! # Why runs leave data, and why it must go
//! A replay keeps its keys when it ends on purpose: `loadtest reconcile DIR` can be run
//! again, and an operator looking into a FAIL needs the records, the ledger and the
//! tokens as they were. But nothing removes them later: the ledger stands in for a
//! wallet, which keeps balances for good (no TTL); claim records keep the service's
//! retention (30 days in `ops/reward-service.toml`). Left alone, they pile up run
//! after run, and that size hurts the very figures the runs exist for: an AOF rewrite
//! of a large dataset forks a child that takes a core for a long while, in the middle
//! of a benchmark if one is running (docs/findings/benchmarks-history.md).
//!
//! # What is removed
//! Every key a load-test run writes carries a family prefix and the run's tag (8 hex
//! digits): `ltt-`, `ltc-`, `ltl-`, `ltd-`, `ltcfg-` for a replay (tokens, claims,
//! ledger, delay queue, dynamic config and its audit log); `gb-`, `gbl-`, `gbt-`,
//! `cbd-`, `cbcfg-`, `ceiling-` for the benches. A key belongs to a run when it is
//! `<family><tag>` or starts with `<family><tag>:`; nothing else is touched, so the
//! same Redis may hold production-shaped data under any other prefix.
//!
//! - `loadtest clean DIR...` removes the keys of those replays (the run directory's
//!   `manifest.json` names the tag) and marks the manifest as cleaned.
//! - `loadtest clean --leftovers` removes the keys of *every* run of every family; it
//!   only counts them unless `--yes` is given.
//! - The benches (`reward-bench grant`, `reward-bench consumer`, the replay's
//!   `--ceilings`) remove their own keys once their checks passed ([`bench_run`]); a
//!   failed bench keeps them to be looked into.
//!
//! Topics are left alone: the brokers' retention ages their records out (a day on the
//! stack), and `ops/stack` removes a log dir or store grown past its limit.
//!
//! # How
//! One `SCAN` pass with a `MATCH` pattern narrowed to the families (Redis filters
//! server-side, so the pass moves little data), keys checked again exactly here, then
//! `UNLINK` in chunks (freed by Redis's background thread, so a large hash does not
//! stall it). Progress is reported per page. On a Redis Cluster every primary is
//! walked.
//!
//! # A running run's keys are not leftovers
//! `--leftovers` takes every tag, and a tag alone cannot tell a finished run from one
//! still writing: a clean beside a running bench would remove its keys and fail its
//! ledger check. So each run holds a [`LiveRun`]: before its first key it writes
//! `ltlive-<tag>` on every Redis the run writes to (its pipeline's and its wallet's):
//! a hash with one field per holder (`pid N on HOST #n`), whose value is the Redis
//! time its hold lasts to, [`LIVE_TTL`] after its last re-arm; it re-arms every
//! [`LIVE_BEAT`] while its process lives. A process that works on a finished run's
//! keys (`loadtest wallet`) holds the same mark in a field of its own, so neither
//! ends the other's hold. A clean asks the Redis it is cleaning, page by page, which
//! tags of the page have a holder whose hold has not run out (one script call per
//! distinct tag, Redis's clock alone), and leaves their keys alone, naming the
//! holders. No race: the mark is
//! written before the run's first key, so any key a clean sees of a live run was
//! written while its mark stood. A clean of two Redis servers (a run's pipeline and
//! wallet) carries the live tags of the first into the second, so a run that ends
//! between the two keeps both halves rather than losing one.
//!
//! A run whose process ended is a leftover at once when it ended the mark
//! ([`LiveRun::end`]) and within [`LIVE_TTL`] when it died. A replay's services are
//! its child processes: if the load tester itself is killed with `SIGKILL`, they can
//! outlive it and its mark; stop them before cleaning (`pgrep -f <run directory>`).

use std::collections::BTreeSet;
use std::time::Duration;

use fred::prelude::*;

use reward_stack::env::without_credentials;

/// Key families of a replay (see the module doc).
pub const REPLAY_FAMILIES: [&str; 5] = ["ltt-", "ltc-", "ltl-", "ltd-", "ltcfg-"];
/// Key families of the benches.
pub const BENCH_FAMILIES: [&str; 10] = [
    "gb-", "gbl-", "gbt-", "cbd-", "cbcfg-", "ceiling-", "aud-", "audt-", "stg-", "stgt-",
];

/// Keys looked at per `SCAN` page. Redis runs each page to its end before anything
/// else: a larger page keeps it busy too long per call, and 1 000 is short enough to
/// clean beside a running replay (docs/findings/benchmarks-history.md).
const SCAN_COUNT: u32 = 1_000;
/// Keys per `UNLINK` call.
const UNLINK_CHUNK: usize = 1_000;

/// Prefix of the live-run marks, `ltlive-<tag>` (not a family: never cleaned, they
/// expire).
pub const LIVE_PREFIX: &str = "ltlive-";
/// How long a holder's mark outlives its last re-arm.
pub const LIVE_TTL: Duration = Duration::from_secs(60);
/// How often a live run re-arms its mark (several times per TTL, so a busy machine's
/// late tick does not let it lapse).
pub const LIVE_BEAT: Duration = Duration::from_secs(10);

/// The mark of run `tag`: a hash, holder -> the Redis time (ms) its hold lasts to.
pub fn live_key(tag: &str) -> String {
    format!("{LIVE_PREFIX}{tag}")
}

/// Re-arms holder `ARGV[1]` of the mark `KEYS[1]` for `ARGV[2]` seconds of Redis's
/// clock, and the whole key's TTL with it.
const MARK_LUA: &str = include_str!("clean/mark.lua");

/// The holders of the mark `KEYS[1]` whose hold has not run out (by Redis's clock).
const HOLDERS_LUA: &str = include_str!("clean/holders.lua");

/// A run's tag, marked live on its Redis servers while this value lives (module doc,
/// "A running run's keys are not leftovers"). Each holder has its own field in the
/// mark, so two processes holding one run (a replay and a `loadtest wallet` on it) do
/// not end each other's hold.
#[derive(Debug)]
pub struct LiveRun {
    tag: String,
    holder: String,
    clients: Vec<Client>,
    beat: tokio::task::JoinHandle<()>,
}

impl LiveRun {
    /// Picks a new run tag (8 hex digits) and marks it live on every Redis in
    /// `redis_urls` (the run's, and its wallet's when apart) before the run writes
    /// anything; the mark is re-armed until [`LiveRun::end`] or drop.
    pub async fn start(redis_urls: &[&str]) -> anyhow::Result<LiveRun> {
        let tag = format!("{:08x}", rand::random::<u32>());
        Self::hold(redis_urls, &tag).await
    }

    /// Marks an existing run's `tag` live on `redis_urls`: for a process that works on a
    /// finished run's keys.
    pub async fn hold(redis_urls: &[&str], tag: &str) -> anyhow::Result<LiveRun> {
        let holder = holder();
        let mut clients = Vec::new();
        let mut seen = BTreeSet::new();
        for url in redis_urls.iter().filter(|u| seen.insert(**u)) {
            let client = connect(url).await?;
            let mark = reward_runtime::script::Script::load(&client, MARK_LUA)
                .await
                .map_err(|e| anyhow::anyhow!("Redis at {}: {e}", without_credentials(url)))?;
            mark_live(&client, &mark, tag, &holder).await.map_err(|e| {
                anyhow::anyhow!(
                    "marking run {tag} live at {}: {e}",
                    without_credentials(url)
                )
            })?;
            clients.push((client, mark));
        }
        let beat = tokio::spawn({
            let (clients, tag, holder) = (clients.clone(), tag.to_string(), holder.clone());
            async move {
                let mut failing = false;
                loop {
                    tokio::time::sleep(LIVE_BEAT).await;
                    let mut err = None;
                    for (c, mark) in &clients {
                        if let Err(e) = mark_live(c, mark, &tag, &holder).await {
                            err = Some(e);
                        }
                    }
                    // Said once when it starts failing and once when it is back, not
                    // every beat: the TTL covers several missed beats.
                    match (err, failing) {
                        (Some(e), false) => {
                            eprintln!("run {tag}: live mark not re-armed ({e}); trying again");
                            failing = true;
                        }
                        (None, true) => {
                            eprintln!("run {tag}: live mark re-armed again");
                            failing = false;
                        }
                        _ => {}
                    }
                }
            }
        });
        Ok(LiveRun {
            tag: tag.to_string(),
            holder,
            clients: clients.into_iter().map(|(c, _)| c).collect(),
            beat,
        })
    }

    /// The run's tag.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Ends this holder's hold at once (with no other holder the run's keys are
    /// leftovers from now on); a hold that cannot be removed runs out within
    /// [`LIVE_TTL`]. Ending twice is harmless. A re-arm already on its way when this
    /// runs may land after it: the hold then lasts its TTL, never less.
    pub async fn end(&self) {
        self.beat.abort();
        for c in &self.clients {
            let _: Result<i64, _> = c.hdel(live_key(&self.tag), self.holder.as_str()).await;
        }
    }
}

impl Drop for LiveRun {
    /// Stops re-arming; this holder's field is removed in the background when a
    /// runtime is still there to do it, else it runs out within [`LIVE_TTL`].
    fn drop(&mut self) {
        self.beat.abort();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let clients = std::mem::take(&mut self.clients);
            let (key, holder) = (live_key(&self.tag), self.holder.clone());
            rt.spawn(async move {
                for c in clients {
                    let _: Result<i64, _> = c.hdel(key.as_str(), holder.as_str()).await;
                    let _ = c.quit().await;
                }
            });
        }
    }
}

/// Who holds a mark: this process and host, and a number of its own (one process may
/// hold a run twice).
fn holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "this host".into()
    } else {
        host
    };
    format!(
        "pid {} on {host} #{:04x}",
        std::process::id(),
        rand::random::<u16>()
    )
}

async fn mark_live(
    client: &Client,
    mark: &reward_runtime::script::Script,
    tag: &str,
    holder: &str,
) -> Result<(), fred::error::Error> {
    let ttl = i64::try_from(LIVE_TTL.as_secs()).unwrap_or(60);
    let _: i64 = mark
        .eval(client, || {
            (
                vec![live_key(tag)],
                vec![Value::from(holder), Value::from(ttl)],
            )
        })
        .await?;
    Ok(())
}

/// Of `tags`, those marked live on `redis_url`, each with its holders.
pub async fn live_marks(
    redis_url: &str,
    tags: &BTreeSet<String>,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    if tags.is_empty() {
        return Ok(Default::default());
    }
    let client = connect(redis_url).await?;
    let found = match holders_script(&client).await {
        Ok(script) => live_tags(&client, &script, tags).await,
        Err(e) => Err(e),
    };
    let _ = client.quit().await;
    found
}

/// [`HOLDERS_LUA`], loaded on `client`.
async fn holders_script(client: &Client) -> anyhow::Result<reward_runtime::script::Script> {
    reward_runtime::script::Script::load(client, HOLDERS_LUA)
        .await
        .map_err(|e| anyhow::anyhow!("loading the live-mark script: {e}"))
}

/// Of `tags`, those with a holder on `client` whose hold has not run out, each with
/// its holders (one script call per tag; cluster-safe). A mark of another type (a
/// key that is not a hash) fails the clean rather than let it remove anything.
async fn live_tags(
    client: &Client,
    holders: &reward_runtime::script::Script,
    tags: &BTreeSet<String>,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut live = std::collections::BTreeMap::new();
    for t in tags {
        let who: Vec<String> = holders
            .eval(client, || (vec![live_key(t)], Vec::new()))
            .await
            .map_err(|e| anyhow::anyhow!("reading live mark {}: {e}", live_key(t)))?;
        if !who.is_empty() {
            live.insert(t.clone(), who.join(", "));
        }
    }
    Ok(live)
}

/// Removes one bench run's keys (every bench family, tag `tag`) on `redis_url`, after
/// its figures are in. A failure does not fail the bench (its figures stand): it is
/// reported on stderr with the command that finishes the job.
pub async fn bench_run(redis_url: &str, tag: &str) {
    if let Err(e) = clean(
        redis_url,
        &Selection::bench_run(tag),
        false,
        None,
        |_, _| {},
    )
    .await
    {
        eprintln!(
            "bench keys of run {tag} not removed ({e:#}); `loadtest clean --leftovers --yes` removes them"
        );
    }
}

/// What a clean did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Keys that matched (removed unless it was a dry run).
    pub matched: u64,
    /// Keys removed.
    pub removed: u64,
    /// Tags whose keys were left alone because their run is live, with the holder of
    /// each mark ("" for a tag the caller said is live).
    pub live: std::collections::BTreeMap<String, String>,
}

/// Which keys a clean takes.
#[derive(Debug, Clone)]
pub enum Selection {
    /// The keys of these runs: tags (8 hex digits) in these families.
    Runs {
        /// Family prefixes, e.g. `ltt-`.
        families: Vec<String>,
        /// Run tags.
        tags: BTreeSet<String>,
    },
    /// Every run's keys in these families.
    AnyRun {
        /// Family prefixes.
        families: Vec<String>,
    },
}

/// Whether `s` is a run tag (8 hex digits).
pub fn is_tag(s: &str) -> bool {
    s.len() == 8 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The tag of `key` when it is `<family><tag>` or `<family><tag>:...`.
fn tag_of<'a>(key: &'a str, family: &str) -> Option<&'a str> {
    let rest = key.strip_prefix(family)?;
    let tag = rest.get(..8)?;
    (is_tag(tag) && (rest.len() == 8 || rest.as_bytes()[8] == b':')).then_some(tag)
}

impl Selection {
    /// The keys of one bench run (`tag`): every bench family.
    pub fn bench_run(tag: &str) -> Self {
        Selection::Runs {
            families: BENCH_FAMILIES.iter().map(|f| f.to_string()).collect(),
            tags: BTreeSet::from([tag.to_string()]),
        }
    }

    /// Whether `key` is one this selection takes.
    pub fn takes(&self, key: &str) -> bool {
        self.tag_taken(key).is_some()
    }

    /// The run tag of `key` when this selection takes it.
    fn tag_taken<'a>(&self, key: &'a str) -> Option<&'a str> {
        match self {
            Selection::Runs { families, tags } => families
                .iter()
                .find_map(|f| tag_of(key, f).filter(|t| tags.contains(*t))),
            Selection::AnyRun { families } => families.iter().find_map(|f| tag_of(key, f)),
        }
    }

    /// The `SCAN MATCH` patterns that cover the selection (Redis globs; this side
    /// checks each key again with [`Selection::takes`]).
    fn patterns(&self) -> Vec<String> {
        match self {
            // One run: its tag is rare enough that a pattern on it alone narrows the
            // scan to that run's keys.
            Selection::Runs { tags, .. } if tags.len() == 1 => {
                tags.iter().map(|t| format!("*{t}*")).collect()
            }
            Selection::Runs { families, .. } | Selection::AnyRun { families } => {
                families.iter().map(|f| format!("{f}*")).collect()
            }
        }
    }
}

/// A client of `redis_url`, connected (the pipeline's reconnect policy and a 10 s
/// deadline per command); errors name the URL without its credentials.
async fn connect(redis_url: &str) -> anyhow::Result<Client> {
    let safe = without_credentials(redis_url);
    let client = reward_runtime::redis::builder(redis_url, Duration::from_secs(10))
        .map_err(|e| anyhow::anyhow!("Redis URL {safe}: {e}"))?
        .build()
        .map_err(|e| anyhow::anyhow!("Redis at {safe}: {e}"))?;
    client
        .init()
        .await
        .map_err(|e| anyhow::anyhow!("Redis at {safe}: {e} (is `ops/stack up` running?)"))?;
    Ok(client)
}

/// Removes (or with `dry_run` only counts) the keys `sel` takes, calling
/// `progress(keys scanned, matched)` after each page. With `live` (tags already known
/// to be live: a clean of a run's second Redis passes what the first found) a live
/// run's keys are left alone: those of the tags given, and of any tag marked live on
/// this Redis ([`LiveRun`]); they are reported in [`Cleaned::live`]. A run cleaning
/// its own keys passes `None`.
pub async fn clean(
    redis_url: &str,
    sel: &Selection,
    dry_run: bool,
    live: Option<&BTreeSet<String>>,
    mut progress: impl FnMut(u64, u64),
) -> anyhow::Result<Cleaned> {
    let client = connect(redis_url).await?;
    let holders = match live {
        Some(_) => Some(holders_script(&client).await?),
        None => None,
    };
    let mut done = Cleaned::default();
    for t in live.into_iter().flatten() {
        done.live.insert(t.clone(), String::new());
    }
    let mut scanned = 0u64;
    // No set of keys seen: a family's keys match only its own pattern, and the one
    // duplicate SCAN allows (a key returned twice while Redis resizes its table) is
    // harmless to UNLINK and not counted by it; only a dry run's count may include it.
    // Memory stays one page whatever the keyspace.
    // On a Redis Cluster every primary is walked (a SCAN sees its own node only), and
    // keys are unlinked one per command in a pipeline: a multi-key UNLINK must stay in
    // one slot there.
    let nodes = reward_runtime::keyspace::nodes(&client)
        .await
        .map_err(|e| anyhow::anyhow!("cluster nodes: {e}"))?;
    for pattern in sel.patterns() {
        for node in &nodes {
            let mut cursor = "0".to_string();
            loop {
                let (next, keys) = reward_runtime::keyspace::scan_page(
                    &client,
                    node.as_ref(),
                    &cursor,
                    &pattern,
                    SCAN_COUNT,
                )
                .await
                .map_err(|e| anyhow::anyhow!("SCAN {pattern}: {e}"))?;
                scanned += u64::from(SCAN_COUNT);
                let mut take: Vec<String> = keys.into_iter().filter(|k| sel.takes(k)).collect();
                if let Some(holders) = &holders {
                    // Asked after the page was read: a key seen here was written while
                    // its run's mark stood, if the run is live.
                    let tags: BTreeSet<String> = take
                        .iter()
                        .filter_map(|k| sel.tag_taken(k).map(str::to_string))
                        .filter(|t| !done.live.contains_key(t))
                        .collect();
                    done.live.extend(live_tags(&client, holders, &tags).await?);
                    take.retain(|k| sel.tag_taken(k).is_none_or(|t| !done.live.contains_key(t)));
                }
                done.matched += take.len() as u64;
                if !dry_run {
                    for chunk in take.chunks(UNLINK_CHUNK) {
                        done.removed += unlink(&client, chunk).await?;
                    }
                }
                progress(scanned, done.matched);
                if next == "0" {
                    break;
                }
                cursor = next;
            }
        }
    }
    let _ = client.quit().await;
    Ok(done)
}

/// Unlinks `keys`, one command each in one pipeline (cluster-safe); answers how many
/// existed.
async fn unlink(client: &Client, keys: &[String]) -> anyhow::Result<u64> {
    let pipe = client.pipeline();
    for k in keys {
        let _: () = pipe
            .unlink(k.as_str())
            .await
            .map_err(|e| anyhow::anyhow!("UNLINK: {e}"))?;
    }
    let answers: Vec<u64> = pipe
        .all()
        .await
        .map_err(|e| anyhow::anyhow!("UNLINK: {e}"))?;
    Ok(answers.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reward_service::claim::keys::{budget_key, record_key};
    use sdk::store::keys::token_key;

    #[test]
    fn a_run_takes_its_own_keys_and_nothing_else() {
        let sel = Selection::Runs {
            families: REPLAY_FAMILIES.iter().map(|f| f.to_string()).collect(),
            tags: BTreeSet::from(["0a1b2c3d".to_string()]),
        };
        for key in [
            token_key("ltt-0a1b2c3d", "u1", "cny"),
            record_key("ltc-0a1b2c3d", 3, "x"),
            "ltcfg-0a1b2c3d".into(),
            "ltcfg-0a1b2c3d:audit".into(),
            "ltl-0a1b2c3d:{7}:balance".into(),
        ] {
            assert!(sel.takes(&key), "{key}");
        }
        for key in [
            token_key("ltt-0a1b2c3e", "u1", "cny"),  // another run
            token_key("ltt-0a1b2c3d0", "u1", "cny"), // not the same tag
            "ltt-0a1b2c3dx".into(),
            record_key("gb-0a1b2c3d", 3, "x"), // a bench family
            "xltt-0a1b2c3d:{u1}".into(),
            "ltt-0a1b2c".into(),
            "user:0a1b2c3d".into(),
        ] {
            assert!(!sel.takes(&key), "{key}");
        }
        assert_eq!(sel.patterns(), vec!["*0a1b2c3d*".to_string()]);
    }

    #[test]
    fn leftovers_take_any_tag_of_the_families_only() {
        let sel = Selection::AnyRun {
            families: BENCH_FAMILIES.iter().map(|f| f.to_string()).collect(),
        };
        assert!(sel.takes("gbl-deadbeef:{7}:credited"));
        assert!(sel.takes(&budget_key("ceiling-00000000", "s", 0)));
        assert!(!sel.takes("gbl-deadbee:{7}"));
        assert!(!sel.takes("gbl-deadbeeg:{7}"));
        assert!(!sel.takes("ltt-deadbeef:{7}"));
        assert!(!sel.takes("claim-test-deadbeef:x"));
    }
}
