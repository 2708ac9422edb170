//! Which replay runs a clean takes, and the marks it leaves in their run directories
//! (the Redis side, key families and the scan, is `reward_tools::clean`).

use std::collections::BTreeSet;
use std::path::Path;

use reward_tools::clean::{REPLAY_FAMILIES, Selection, is_tag};

/// Marks as cleaned (at `at_ms`) every replay run directory directly under `out` whose
/// manifest names `redis_url`, is not marked yet and whose tag is in `take` (the
/// [`unmarked_tags`] found before the clean, less the runs still running): after
/// `clean --leftovers --yes` their keys are gone too, and `reconcile` must say so
/// rather than fail on empty data. A run that appeared since is not in `take`.
/// Returns the directories marked; a directory without a readable manifest is skipped.
pub fn mark_runs_cleaned(
    out: &Path,
    redis_url: &str,
    take: &BTreeSet<String>,
    at_ms: i64,
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut marked = Vec::new();
    let entries = match std::fs::read_dir(out) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(marked),
        Err(e) => anyhow::bail!("{}: {e}", out.display()),
    };
    for entry in entries {
        let dir = entry?.path();
        let Ok(mut m) = crate::setup::Manifest::load(&dir) else {
            continue;
        };
        if m.redis_url == redis_url && m.cleaned_unix_ms.is_none() && take.contains(&m.tag) {
            m.cleaned_unix_ms = Some(at_ms);
            m.save(&dir)?;
            marked.push(dir);
        }
    }
    marked.sort();
    Ok(marked)
}

/// The tags of the replay runs directly under `out` whose manifests name `redis_url`
/// and are not marked cleaned (those [`mark_runs_cleaned`] would mark).
pub fn unmarked_tags(out: &Path, redis_url: &str) -> anyhow::Result<BTreeSet<String>> {
    let entries = match std::fs::read_dir(out) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => anyhow::bail!("{}: {e}", out.display()),
    };
    let mut tags = BTreeSet::new();
    for entry in entries {
        if let Ok(m) = crate::setup::Manifest::load(&entry?.path())
            && m.redis_url == redis_url
            && m.cleaned_unix_ms.is_none()
        {
            tags.insert(m.tag);
        }
    }
    Ok(tags)
}

/// The Redis of each run's ledger in `dirs` other than the run's own, once each.
pub fn ledger_urls(dirs: &[&Path]) -> anyhow::Result<Vec<String>> {
    let mut urls = BTreeSet::new();
    for dir in dirs {
        let m = crate::setup::Manifest::load(dir)?;
        if m.ledger_redis() != m.redis_url {
            urls.insert(m.ledger_redis().to_string());
        }
    }
    Ok(urls.into_iter().collect())
}

/// The selection of the replays in `dirs` (their `manifest.json`).
pub fn replay_runs(dirs: &[&Path]) -> anyhow::Result<(String, Selection)> {
    let mut tags = BTreeSet::new();
    let mut url: Option<String> = None;
    for dir in dirs {
        let m = crate::setup::Manifest::load(dir)?;
        if !is_tag(&m.tag) {
            anyhow::bail!("{}: tag {:?} is not a run tag", dir.display(), m.tag);
        }
        match &url {
            Some(u) if *u != m.redis_url => anyhow::bail!(
                "{} used Redis {}, the others {}: clean them separately",
                dir.display(),
                reward_stack::env::without_credentials(&m.redis_url),
                reward_stack::env::without_credentials(u)
            ),
            _ => url = Some(m.redis_url.clone()),
        }
        tags.insert(m.tag);
    }
    let url = url.ok_or_else(|| anyhow::anyhow!("no run directory given"))?;
    Ok((
        url,
        Selection::Runs {
            families: REPLAY_FAMILIES.iter().map(|f| f.to_string()).collect(),
            tags,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftovers_mark_the_manifests_of_that_redis_only() {
        let out = std::env::temp_dir().join(format!("clean-mark-{:08x}", rand::random::<u32>()));
        let with_tag = |tag: &str, url: &str, cleaned: Option<i64>| {
            serde_json::json!({
                "tag": tag, "profile": "rain", "redis_url": url,
                "token_prefix": "ltt-0a1b2c3d", "claims_prefix": "ltc-0a1b2c3d",
                "claims_shards": 16, "ledger_prefix": "ltl-0a1b2c3d", "budgets": {},
                "limits": {}, "topics": {}, "started_unix_ms": 1,
                "token_write_failures": 0, "cleaned_unix_ms": cleaned,
            })
        };
        let manifest = |url: &str, cleaned: Option<i64>| with_tag("0a1b2c3d", url, cleaned);
        for (name, m) in [
            ("a", manifest("redis://r1", None)),
            ("b", manifest("redis://r2", None)),
            ("c", manifest("redis://r1", Some(5))),
            // Still running: its keys were left alone, so it is not marked.
            ("d", with_tag("0e0e0e0e", "redis://r1", None)),
        ] {
            std::fs::create_dir_all(out.join(name)).unwrap();
            std::fs::write(out.join(name).join("manifest.json"), m.to_string()).unwrap();
        }
        std::fs::create_dir_all(out.join("no-manifest")).unwrap();
        // "0e0e0e0e" is still running: not among the tags to take.
        let take = BTreeSet::from(["0a1b2c3d".to_string()]);
        let marked = mark_runs_cleaned(&out, "redis://r1", &take, 42).unwrap();
        assert_eq!(marked, vec![out.join("a")]);
        let load = |n: &str| crate::setup::Manifest::load(&out.join(n)).unwrap();
        assert_eq!(load("a").cleaned_unix_ms, Some(42));
        assert_eq!(load("b").cleaned_unix_ms, None);
        assert_eq!(load("c").cleaned_unix_ms, Some(5));
        assert_eq!(load("d").cleaned_unix_ms, None);
        // Nothing under a directory that does not exist.
        assert!(
            mark_runs_cleaned(&out.join("none"), "redis://r1", &BTreeSet::new(), 1)
                .unwrap()
                .is_empty()
        );
        std::fs::remove_dir_all(&out).unwrap();
    }
}
