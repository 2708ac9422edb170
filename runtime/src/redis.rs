//! One way to build a Redis client that survives its server going away.
//!
//! fred reconnects only when given a policy; without one a client whose connection
//! dropped (Redis restarted, a cluster primary killed and its replica promoted) fails
//! every later command. Every long-lived client of the pipeline is built here: it
//! reconnects without limit (100 ms, doubling to 2 s), gives every command a deadline,
//! and on a Redis Cluster refreshes its slot map when a node answers MOVED or goes
//! away, so a failover or a reshard costs the in-flight commands, not the client.

use std::time::Duration;

use fred::prelude::{Builder, Config, ReconnectPolicy};

/// A builder for `url` (`redis://…` or `redis-cluster://…`) with the reconnect policy
/// and `timeout` as the connect, internal and per-command deadline.
pub fn builder(url: &str, timeout: Duration) -> Result<Builder, fred::error::Error> {
    let mut b = Builder::from_config(Config::from_url(url)?);
    b.with_connection_config(|c| {
        c.connection_timeout = timeout;
        c.internal_command_timeout = timeout;
        // A cluster client retries a command after a MOVED/ASK or a lost node this
        // many times (each after refreshing its slot map) before failing it.
        c.max_redirections = 16;
    })
    .with_performance_config(|p| {
        p.default_command_timeout = timeout;
    })
    .set_policy(ReconnectPolicy::new_exponential(0, 100, 2_000, 2));
    Ok(b)
}
