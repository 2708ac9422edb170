//! Runtime configuration changes, from one source every component shares.
//!
//! The SDK (queue ratios, routing, topics), the consumer (rates, fuses, priorities)
//! and the reward service (budgets) all read their dynamic settings from the same
//! document. Two sources feed it, applied in this order over the start-up file:
//!
//! 1. a **file** polled for changes (edit it on one machine);
//! 2. a **Redis hash** of dotted keys (`queues.massive.ratio` → `80`), so that one
//!    command changes every instance at once: `ops/config set queues.massive.ratio 80`.
//!
//! Every `poll` period the watcher rebuilds the effective document; when it differs
//! from the last one, each subscriber's `apply` runs. A subscriber validates the whole
//! document before swapping it in (with `arc-swap`, so readers never block); a bad
//! change is refused, logged and counted, and the previous settings stay. The
//! source design polled every 5 s; the default here is 500 ms, well inside the 1 s
//! the consumer needs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;

use crate::env::set_path;

/// A subscriber: gets the whole effective document, answers whether it took it.
pub type Apply = Arc<dyn Fn(&toml::Table) -> Result<(), String> + Send + Sync>;

/// Where changes come from.
#[derive(Clone)]
pub struct Sources {
    /// The document at start-up.
    pub base: toml::Table,
    /// A TOML file merged over `base`.
    pub file: Option<PathBuf>,
    /// A Redis hash of dotted keys merged last.
    pub redis: Option<(Pool, String)>,
    /// Poll period.
    pub poll: Duration,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("file", &self.file)
            .field("redis_key", &self.redis.as_ref().map(|r| &r.1))
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

/// Merges `over` into `base`, table by table.
pub fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Builds a document from dotted keys (`a.b.c` → `[a.b] c = ...`).
pub fn from_dotted<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<toml::Table, String> {
    let mut doc = toml::Table::new();
    for (k, v) in pairs {
        let parts: Vec<&str> = k.split('.').collect();
        set_path(&mut doc, &parts, v).map_err(|e| format!("{k}: {e}"))?;
    }
    Ok(doc)
}

impl Sources {
    /// The effective document now.
    pub async fn read(&self) -> Result<toml::Table, String> {
        let mut doc = self.base.clone();
        if let Some(path) = &self.file {
            let text = tokio::fs::read_to_string(path)
                .await
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let over: toml::Table = text
                .parse()
                .map_err(|e| format!("{}: {e}", path.display()))?;
            merge(&mut doc, &over);
        }
        if let Some((pool, key)) = &self.redis {
            let pairs: std::collections::HashMap<String, String> = pool
                .next()
                .hgetall(key.as_str())
                .await
                .map_err(|e| format!("redis {key}: {e}"))?;
            let over = from_dotted(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
            merge(&mut doc, &over);
        }
        Ok(doc)
    }

    /// Polls the sources and calls every subscriber on each change, until the
    /// returned handle is aborted.
    pub fn watch(self, subscribers: Vec<Apply>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut last: Option<toml::Table> = None;
            let mut ticker = tokio::time::interval(self.poll);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let doc = match self.read().await {
                    Ok(d) => d,
                    Err(e) => {
                        metrics::counter!("reward_config_read_errors_total").increment(1);
                        tracing::warn!(error = %e, "dynamic config source unreadable; keeping the current settings");
                        continue;
                    }
                };
                if last.as_ref() == Some(&doc) {
                    continue;
                }
                let first = last.is_none();
                for apply in &subscribers {
                    match apply(&doc) {
                        Ok(()) => {
                            if !first {
                                metrics::counter!("reward_config_changes_total").increment(1);
                                tracing::info!("dynamic config applied");
                            }
                        }
                        Err(e) => {
                            metrics::counter!("reward_config_rejected_total").increment(1);
                            tracing::warn!(error = %e, "dynamic config change refused; keeping the current settings");
                        }
                    }
                }
                last = Some(doc);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_keys_merge_over_the_base() {
        let mut base: toml::Table = "[queues.m]\nratio = 10\ntopic = \"t\"\n".parse().unwrap();
        let over = from_dotted([("queues.m.ratio", "80"), ("rates.cash", "2000")]).unwrap();
        merge(&mut base, &over);
        assert_eq!(base["queues"]["m"]["ratio"].as_integer(), Some(80));
        assert_eq!(base["queues"]["m"]["topic"].as_str(), Some("t"));
        assert_eq!(base["rates"]["cash"].as_integer(), Some(2000));
        assert!(from_dotted([("a..b", "1")]).is_err());
    }
}
