//! Waiting for a replica before money moves (`claims.replica_acks`).
//!
//! Redis replicates asynchronously: a claim the primary acknowledged can be missing
//! on the replica a failover promotes. If that happens after the downstream credited,
//! the next delivery of the event finds no record, claims afresh and credits again
//! (harmless against a downstream that honours the idempotency key, a double credit
//! against one that does not; `docs/cluster.md`). With `replica_acks = N > 0` every
//! claim call is followed by `WAIT N replica_wait_ms` on the same connection, routed
//! to the claim's slot, and the claims are only used when N replicas acknowledged
//! them. Otherwise the call answers [`ClaimError::NotReplicated`]: no credit is made,
//! the grant is retried like any claim-store failure, and the claim left behind is
//! resolved by the downstream's status once its lease runs out, as any vanished
//! owner's is. A `WAIT` whose answer is lost (the command's deadline) is the same
//! case: the claim may or may not be on a replica, so it is not used. Start-up refuses `N` larger than the replicas some primary has
//! ([`ClaimError::Replicas`]), so a single Redis without replicas cannot be configured
//! into refusing every grant.

use fred::interfaces::ClientLike;
use fred::prelude::Client;
use fred::types::{ClusterHash, CustomCommand, Key};

use super::error::ClaimError;
use super::store::Claims;

impl Claims {
    /// After a claim script on `client` that wrote `key`: waits until
    /// `replica_acks` replicas have it (nothing to do when 0).
    pub(super) async fn replicated(&self, client: &Client, key: &str) -> Result<(), ClaimError> {
        let wanted = self.cfg.replica_acks;
        if wanted == 0 {
            return Ok(());
        }
        let slot = Key::from(key).cluster_hash();
        let acked: i64 = client
            .custom(
                CustomCommand::new_static("WAIT", ClusterHash::Custom(slot), false),
                vec![wanted.to_string(), self.cfg.replica_wait_ms.to_string()],
            )
            .await?;
        metrics::counter!("reward_service_replica_waits_total").increment(1);
        if acked < i64::from(wanted) {
            metrics::counter!("reward_service_not_replicated_total").increment(1);
            return Err(ClaimError::NotReplicated {
                acked: u32::try_from(acked.max(0)).unwrap_or(0),
                wanted,
            });
        }
        Ok(())
    }

    /// Refuses `replica_acks` above the connected replicas of any primary.
    pub(super) async fn check_replicas(client: &Client, wanted: u32) -> Result<(), ClaimError> {
        if wanted == 0 {
            return Ok(());
        }
        for node in reward_runtime::keyspace::nodes(client).await? {
            let info: String = reward_runtime::keyspace::on_node(
                client,
                node.as_ref(),
                "INFO",
                vec!["replication"],
            )
            .await?;
            let have = connected_replicas(&info);
            if have < wanted {
                return Err(ClaimError::Replicas {
                    node: node.map_or_else(|| "the Redis".to_string(), |s| s.to_string()),
                    have,
                    wanted,
                });
            }
        }
        Ok(())
    }
}

/// `connected_slaves:N` of an `INFO replication` reply (0 when absent).
pub(super) fn connected_replicas(info: &str) -> u32 {
    info.lines()
        .find_map(|l| l.trim().strip_prefix("connected_slaves:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::connected_replicas;

    #[test]
    fn reads_the_replica_count() {
        assert_eq!(
            connected_replicas("# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=1"),
            1
        );
        assert_eq!(connected_replicas("role:master\r\n"), 0);
        assert_eq!(connected_replicas("connected_slaves:x\r\n"), 0);
    }
}
