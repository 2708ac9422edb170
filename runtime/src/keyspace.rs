//! Walking the keyspace on one Redis or on every primary of a Redis Cluster.
//!
//! `SCAN` answers for the node it is sent to: on a cluster one node holds only its own
//! slots, so a walk that must see every key (the reward service's check for a store of
//! an older layout, the load tester's `clean`) visits every primary. A walk is only as
//! complete as the cluster is still: keys that move during a reshard may be missed or
//! seen twice, which both callers tolerate (a second look, an UNLINK of a gone key).

use fred::interfaces::{ClientLike, ClusterInterface};
use fred::prelude::Client;
use fred::types::config::Server;
use fred::types::{ClusterHash, CustomCommand};

/// The nodes a walk visits: every primary of a cluster (from the client's routing
/// table, fetched when the client has none yet), or `[None]`, the one server of a
/// single Redis.
pub async fn nodes(client: &Client) -> Result<Vec<Option<Server>>, fred::error::Error> {
    if !client.is_clustered() {
        return Ok(vec![None]);
    }
    if client.cached_cluster_state().is_none() {
        client.sync_cluster().await?;
    }
    match client.cached_cluster_state() {
        Some(state) => Ok(state.unique_primary_nodes().into_iter().map(Some).collect()),
        None => Err(fred::error::Error::new(
            fred::error::ErrorKind::Cluster,
            "the cluster's routing table is unknown",
        )),
    }
}

/// One `SCAN` page on `node` (`None`: the single server): the next cursor ("0" at the
/// end) and the keys matching `pattern`.
pub async fn scan_page(
    client: &Client,
    node: Option<&Server>,
    cursor: &str,
    pattern: &str,
    count: u32,
) -> Result<(String, Vec<String>), fred::error::Error> {
    let count = count.to_string();
    on_node(
        client,
        node,
        "SCAN",
        vec![cursor, "MATCH", pattern, "COUNT", count.as_str()],
    )
    .await
}

/// Sends `command args...` to `node` (`None`: the single server, or any node).
pub async fn on_node<R: fred::prelude::FromValue>(
    client: &Client,
    node: Option<&Server>,
    command: &'static str,
    args: Vec<&str>,
) -> Result<R, fred::error::Error> {
    let cmd = CustomCommand::new_static(command, ClusterHash::Random, false);
    match node {
        Some(server) => {
            client
                .with_cluster_node(server.clone())
                .custom(cmd, args)
                .await
        }
        None => client.custom(cmd, args).await,
    }
}

/// Whether any key matching `pattern` exists on any node.
pub async fn any_match(client: &Client, pattern: &str) -> Result<bool, fred::error::Error> {
    any_match_of(client, pattern, None).await
}

/// Whether any key matching `pattern` and, when given, of Redis type `of` (`hash`,
/// `string`, ...: `SCAN`'s `TYPE` filter) exists on any node.
pub async fn any_match_of(
    client: &Client,
    pattern: &str,
    of: Option<&str>,
) -> Result<bool, fred::error::Error> {
    for node in nodes(client).await? {
        let mut cursor = "0".to_string();
        loop {
            let (next, keys): (String, Vec<String>) = match of {
                None => scan_page(client, node.as_ref(), &cursor, pattern, 1000).await?,
                Some(t) => {
                    on_node(
                        client,
                        node.as_ref(),
                        "SCAN",
                        vec![&cursor, "MATCH", pattern, "COUNT", "1000", "TYPE", t],
                    )
                    .await?
                }
            };
            if !keys.is_empty() {
                return Ok(true);
            }
            if next == "0" {
                break;
            }
            cursor = next;
        }
    }
    Ok(false)
}

/// `text` with Redis glob characters (`* ? [ ] \`) escaped, for a `MATCH` pattern
/// that must match it literally.
///
/// ```
/// assert_eq!(reward_runtime::keyspace::glob_escape("a*b[1]"), r"a\*b\[1\]");
/// ```
pub fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// How a bounded walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walked {
    /// Every node was walked to its end: every matching key was seen (as complete as
    /// a cluster that is not resharding allows).
    Complete,
    /// The visitor asked to stop.
    Stopped,
    /// The page budget ran out first.
    OutOfBudget,
}

/// Walks the keys matching `pattern` on every node, at most `max_pages` `SCAN` pages
/// of `count` slots each in all (so its cost is bounded whatever the keyspace holds),
/// handing each key to `visit`, which answers `true` to stop; `on_page` hears the
/// number of pages read so far after each (for progress).
pub async fn walk(
    client: &Client,
    pattern: &str,
    count: u32,
    max_pages: u64,
    mut visit: impl FnMut(&str) -> bool,
    mut on_page: impl FnMut(u64),
) -> Result<Walked, fred::error::Error> {
    let mut pages = 0u64;
    for node in nodes(client).await? {
        let mut cursor = "0".to_string();
        loop {
            if pages >= max_pages {
                return Ok(Walked::OutOfBudget);
            }
            pages += 1;
            on_page(pages);
            let (next, keys) = scan_page(client, node.as_ref(), &cursor, pattern, count).await?;
            for k in &keys {
                if visit(k) {
                    return Ok(Walked::Stopped);
                }
            }
            if next == "0" {
                break;
            }
            cursor = next;
        }
    }
    Ok(Walked::Complete)
}

/// Samples (keys or members placed by a hash) that agree with a configured shard
/// count and prove it on their own: a sample of another count agrees by chance at
/// most half the time, so 32 leave at most a 2^-32 chance of a wrong count.
pub const ENOUGH_SAMPLES: u64 = 32;

/// What a store's own keys say of a configured shard count, when the key that pinned
/// the count is gone (the claim store's `{prefix}:meta`, the due index's
/// `{prefix}:due-shards`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutProof {
    /// No key of the store exists: a fresh store.
    Empty,
    /// The keys seen agree with the count.
    Agrees {
        /// Placed samples checked (records, index members).
        samples: u64,
        /// Whether every key was seen.
        complete: bool,
    },
    /// A key proves another count.
    Differs {
        /// The key.
        key: String,
        /// How it proves it.
        why: String,
    },
    /// The walk ended (out of budget) with too few samples to decide.
    Unproven {
        /// Keys of the store seen.
        keys: u64,
        /// Samples among them, all agreeing.
        samples: u64,
    },
}

/// The shard number a key writes in decimal (`3`, `17`), or `None` for anything else
/// (`+3`, `03`, empty): only what the pipeline itself writes counts as a shard.
///
/// ```
/// use reward_runtime::keyspace::shard_number;
/// assert_eq!(shard_number("17"), Some(17));
/// assert_eq!(shard_number("0"), Some(0));
/// assert_eq!(shard_number("+3"), None);
/// assert_eq!(shard_number("03"), None);
/// ```
pub fn shard_number(text: &str) -> Option<u32> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    if canonical { text.parse().ok() } else { None }
}
