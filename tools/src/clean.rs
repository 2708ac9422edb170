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
//! Topics are left alone: the brokers' retention ages them out, and tansu keeps each
//! in a few SQLite rows.
//!
//! # How
//! One `SCAN` pass with a `MATCH` pattern narrowed to the families (Redis filters
//! server-side, so the pass moves little data), keys checked again exactly here, then
//! `UNLINK` in chunks (freed by Redis's background thread, so a large hash does not
//! stall it). Progress is reported per page. On a Redis Cluster every primary is
//! walked.

use std::collections::BTreeSet;

use fred::prelude::*;

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

/// Removes one bench run's keys (every bench family, tag `tag`) on `redis_url`, after
/// its figures are in. A failure does not fail the bench (its figures stand): it is
/// reported on stderr with the command that finishes the job.
pub async fn bench_run(redis_url: &str, tag: &str) {
    if let Err(e) = clean(redis_url, &Selection::bench_run(tag), false, |_, _| {}).await {
        eprintln!(
            "bench keys of run {tag} not removed ({e:#}); `loadtest clean --leftovers --yes` removes them"
        );
    }
}

/// What a clean did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// Keys that matched (removed unless it was a dry run).
    pub matched: u64,
    /// Keys removed.
    pub removed: u64,
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
        match self {
            Selection::Runs { families, tags } => families
                .iter()
                .any(|f| tag_of(key, f).is_some_and(|t| tags.contains(t))),
            Selection::AnyRun { families } => families.iter().any(|f| tag_of(key, f).is_some()),
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

/// Removes (or with `dry_run` only counts) the keys `sel` takes, calling
/// `progress(keys scanned, matched)` after each page.
pub async fn clean(
    redis_url: &str,
    sel: &Selection,
    dry_run: bool,
    mut progress: impl FnMut(u64, u64),
) -> anyhow::Result<Cleaned> {
    let client = Builder::from_config(
        Config::from_url(redis_url).map_err(|e| anyhow::anyhow!("Redis URL {redis_url}: {e}"))?,
    )
    .build()?;
    client
        .init()
        .await
        .map_err(|e| anyhow::anyhow!("Redis at {redis_url}: {e} (is `ops/stack up` running?)"))?;
    let mut done = Cleaned::default();
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
                let take: Vec<String> = keys.into_iter().filter(|k| sel.takes(k)).collect();
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

    #[test]
    fn a_run_takes_its_own_keys_and_nothing_else() {
        let sel = Selection::Runs {
            families: REPLAY_FAMILIES.iter().map(|f| f.to_string()).collect(),
            tags: BTreeSet::from(["0a1b2c3d".to_string()]),
        };
        for key in [
            "ltt-0a1b2c3d:{u1}:cny",
            "ltc-0a1b2c3d:{rain:3}:t:x",
            "ltcfg-0a1b2c3d",
            "ltcfg-0a1b2c3d:audit",
            "ltl-0a1b2c3d:{7}:balance",
        ] {
            assert!(sel.takes(key), "{key}");
        }
        for key in [
            "ltt-0a1b2c3e:{u1}:cny",  // another run
            "ltt-0a1b2c3d0:{u1}:cny", // not the same tag
            "ltt-0a1b2c3dx",
            "gb-0a1b2c3d:{rain:3}:t:x", // a bench family
            "xltt-0a1b2c3d:{u1}",
            "ltt-0a1b2c",
            "user:0a1b2c3d",
        ] {
            assert!(!sel.takes(key), "{key}");
        }
        assert_eq!(sel.patterns(), vec!["*0a1b2c3d*".to_string()]);
    }

    #[test]
    fn leftovers_take_any_tag_of_the_families_only() {
        let sel = Selection::AnyRun {
            families: BENCH_FAMILIES.iter().map(|f| f.to_string()).collect(),
        };
        assert!(sel.takes("gbl-deadbeef:{7}:credited"));
        assert!(sel.takes("ceiling-00000000:{s:0}:budget"));
        assert!(!sel.takes("gbl-deadbee:{7}"));
        assert!(!sel.takes("gbl-deadbeeg:{7}"));
        assert!(!sel.takes("ltt-deadbeef:{7}"));
        assert!(!sel.takes("claim-test-deadbeef:x"));
    }
}
