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
    for node in nodes(client).await? {
        let mut cursor = "0".to_string();
        loop {
            let (next, keys) = scan_page(client, node.as_ref(), &cursor, pattern, 1000).await?;
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
