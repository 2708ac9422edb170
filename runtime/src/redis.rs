//! One way to build a Redis client that survives its server going away.
//!
//! fred reconnects only when given a policy; without one a client whose connection
//! dropped (Redis restarted, a cluster primary killed and its replica promoted) fails
//! every later command. Every long-lived client of the pipeline is built here: it
//! reconnects without limit (100 ms, doubling to 2 s), gives every command a deadline,
//! and on a Redis Cluster refreshes its slot map when a node answers MOVED or goes
//! away, so a failover or a reshard costs the in-flight commands, not the client.
//!
//! # No redirection is followed
//! fred 10.1 follows a `MOVED` by refreshing its slot map and resending, and an `ASK`
//! (a key whose slot is being moved and which has already left) by writing `ASKING`
//! on its shared, pipelined connection to the new primary and reading the next reply
//! there as `ASKING`'s. With other calls in flight on that connection, that reply is
//! theirs: each of them then gets the reply of the call behind it; and the client's
//! one routing task can stop for good (every later command times out; a fresh client
//! works at once). Reproduced by `a_moving_slot_never_hands_a_script_call_another_calls_reply`
//! (`reward-service/tests/cluster.rs`: one slot of 12 000 keys moved under 48 callers
//! of one client): following redirections, 1 to 3 calls per run got another call's
//! reply, the client answered only ~9 000 calls during the move, and then timed out
//! every command for the 150 s the test waited; this was the ledger's "status reads
//! failing for over a minute" after a reshard and the SDK's calls refused until the end
//! of a cluster drill (`docs/cluster.md`). So `max_redirections` is 0: a `MOVED`
//! still refreshes the slot map, and the command fails fast with a routing error
//! ([`is_redirected`]); an `ASK` fails the same way without `ASKING` being sent. A
//! single command that fails so did not run (Redis redirects instead of running), and
//! [`crate::script::Script::eval`] sends it again a few times (a `MOVED` has refreshed
//! the map by then); a pipeline gets the error for all of its calls, some of which may
//! have run on other primaries, so there it means in doubt. Every caller already
//! treats a failed call as in doubt and tries again (the SDK within the call's wait,
//! the consumers by resending the batch, the ledger's credits through their status).
//! While a slot is being moved, its keys that have already left fail until the whole
//! slot has moved: milliseconds for a slot of a few dozen keys, longer for a slot that
//! holds thousands. The same test then answers 7-10 times as many calls during the move, none
//! with another's reply, and the client serves on. Script replies are checked besides
//! ([`crate::script`], "Every reply proves whose it is").

use std::time::Duration;

use fred::error::{Error, ErrorKind};
use fred::prelude::{Builder, Config, ReconnectPolicy};

/// How fred's error for a redirected command (`MOVED` or `ASK`, not followed: module
/// doc) begins. A single command that failed so did not run; in a pipeline the error
/// is given to every call of it, some of which may have run elsewhere.
pub const REDIRECTED: &str = "Too many redirections";

/// Whether `e` is a redirection not followed (see [`REDIRECTED`]).
pub fn is_redirected(e: &Error) -> bool {
    *e.kind() == ErrorKind::Routing && e.details().starts_with(REDIRECTED)
}

/// A builder for `url` (`redis://…` or `redis-cluster://…`) with the reconnect policy
/// and `timeout` as the connect, internal and per-command deadline.
pub fn builder(url: &str, timeout: Duration) -> Result<Builder, fred::error::Error> {
    let mut b = Builder::from_config(Config::from_url(url)?);
    b.with_connection_config(|c| {
        c.connection_timeout = timeout;
        c.internal_command_timeout = timeout;
        // No redirection is followed (module doc: fred's ASK path hands replies to
        // the wrong callers and can wedge the client): a MOVED still refreshes the
        // slot map, then the command fails fast and its caller tries again.
        c.max_redirections = 0;
    })
    .with_performance_config(|p| {
        p.default_command_timeout = timeout;
    })
    .set_policy(ReconnectPolicy::new_exponential(0, 100, 2_000, 2));
    Ok(b)
}

/// The calls a script over many keys needs: the indexes `items`, grouped by the cluster
/// slot of their key (`key_of`, asked only on a cluster; one group on a single node),
/// in order within a group, cut into chunks of at most `per_call`. A script's keys
/// must share one slot on a cluster.
pub fn slot_chunks<K: AsRef<[u8]>>(
    clustered: bool,
    items: impl IntoIterator<Item = usize>,
    key_of: impl Fn(usize) -> K,
    per_call: usize,
) -> Vec<Vec<usize>> {
    let mut groups: std::collections::BTreeMap<u16, Vec<usize>> = Default::default();
    for i in items {
        let slot = if clustered {
            fred::util::redis_keyslot(key_of(i).as_ref())
        } else {
            0
        };
        groups.entry(slot).or_default().push(i);
    }
    groups
        .into_values()
        .flat_map(|g| {
            g.chunks(per_call.max(1))
                .map(<[usize]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod slot_tests {
    use super::slot_chunks;

    #[test]
    fn items_group_by_slot_in_order_and_chunk() {
        let keys = ["{a}:1", "{b}:1", "{a}:2", "{a}:3", "{b}:2"];
        let one = slot_chunks(false, 0..5, |i| keys[i], 2);
        assert_eq!(one, vec![vec![0, 1], vec![2, 3], vec![4]]);
        let mut by_slot = slot_chunks(true, 0..5, |i| keys[i], 2);
        by_slot.sort();
        assert_eq!(by_slot, vec![vec![0, 2], vec![1, 4], vec![3]]);
        assert!(slot_chunks(true, 0..0, |i| keys[i], 2).is_empty());
    }
}
