//! The activity side of a replay: the SDK in this process, or the pool of hosts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sdk::request::RewardRequest;

use super::pool::HostPool;
use reward_standins::sdk_host::{HostStats, Sent, refusal};

/// The activity side: the SDK in this process, or SDK hosts.
pub(crate) enum Side {
    /// One SDK in this process.
    Local(Arc<sdk::Sdk>),
    /// SDK hosts (child processes).
    Hosts(Box<HostPool>),
}

impl Side {
    /// Sends one request.
    pub(crate) async fn send(&self, req: RewardRequest) -> Sent {
        match self {
            Self::Local(sdk) => match sdk.send_reward(req).await {
                Ok(t) => Sent::Accepted(t.held_by.label()),
                Err(e) => Sent::Refused(refusal(&e)),
            },
            Self::Hosts(pool) => pool.send(req).await,
        }
    }

    /// The SDK's queue counters (summed over the hosts).
    pub(crate) fn stats(&self) -> sdk::queue::StatsSnapshot {
        match self {
            Self::Local(sdk) => sdk.stats(),
            Self::Hosts(pool) => pool.stats().snapshot(),
        }
    }

    /// Waits until every killed SDK host is running again (or failed to start).
    pub(crate) async fn hosts_back(&self) {
        if let Self::Hosts(p) = self {
            p.back().await;
        }
    }

    /// Whether a host died during the run (its rewards are marked in `hosts.tsv`).
    pub(crate) fn lost_a_host(&self) -> bool {
        matches!(self, Self::Hosts(p) if p.killed() > 0)
    }

    /// From when a reward of a killed host that is neither stored nor credited can
    /// be taken as lost with it: after the last killed host was back (its spool
    /// replayed), the sweeper's grace period, and 10 s for the queues to deliver
    /// what was already in them. `None`: no host was killed.
    pub(crate) fn lost_settle_at(&self, grace: Duration) -> Option<std::time::Instant> {
        match self {
            Self::Hosts(p) => p.last_back().map(|t| t + grace + Duration::from_secs(10)),
            Self::Local(_) => None,
        }
    }

    /// Closes the SDK (or every host): the final counters, and the token writes
    /// given up or unanswered at close.
    pub(crate) async fn close(&self) -> anyhow::Result<(BTreeMap<String, u64>, u64)> {
        match self {
            Self::Local(sdk) => {
                let close = sdk.close(Duration::from_secs(30)).await;
                let st = HostStats::of(sdk, &close.stats, close.tokens_left);
                Ok((
                    st.counters(),
                    sdk.token_write_failures() + close.tokens_left,
                ))
            }
            Self::Hosts(pool) => {
                let st = pool.close().await?;
                Ok((st.counters(), st.tokens_given_up + st.tokens_left))
            }
        }
    }
}
