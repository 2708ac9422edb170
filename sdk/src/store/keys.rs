//! Every Redis key, member and `SCAN` pattern of the token store, built from the
//! store's key prefix (`[sdk.store] key_prefix`). The store, the reward service, the
//! operators' tools, the benchmarks and the load tester all build them here, so the
//! layout is written once.
//!
//! ```text
//! {prefix}:{user}:{activity}   hash    one user's tokens in one activity: trade number
//!                                      -> the token's state (`super::life::Field`); the
//!                                      hash tag is the user, so one user's hashes share
//!                                      a cluster slot
//! {prefix}:{due.N}             zset    due index shard N = crc32(user) % shards (its own
//!                                      hash tag): member user|activity|trade, score the
//!                                      write's time in Unix ms
//! {prefix}:due-shards          string  the due index's shard count, pinned at first use
//! ```
//!
//! # Layout
//! One hash per user and activity: key `{prefix}:{user}:{activity}` ([`token_key`]),
//! field = trade number, value = the sealed token while its reward waits for its
//! credit, `!` and the token once credited ([`super::life`] has the states and why one
//! field holds them). The hash tag is the user id, so in a Redis Cluster all of one
//! user's tokens (across activities) live in one slot and the wallet page reads them
//! from one node. Every write that adds a token re-arms the hash's TTL (once per hash
//! per batch of writes; a retried write that only replaces its token does not), so
//! every token lives in the store `ttl_secs` after its write: the sweeper finds a
//! reward's token here, so the hash must not expire under it.
//!
//! # Due index
//! Before its token, each write puts an entry in a *due index*: sorted sets
//! `{prefix}:{due.N}` ([`due_key`]; `store.due_shards` of them, N = crc32(user) mod
//! shards, each its own hash tag), member `user|activity|trade` ([`due_member`]), score
//! the write's time (`ZADD NX`, so a retry keeps the first time). The credit's token
//! move removes the entry; what stays is a reward not credited yet, oldest first. The
//! reward service's sweeper (`reward_service::sweeper`) grants those that waited past a
//! grace period, which is how a reward whose event died with its process (or was lost
//! by a queue) is still credited: the token store, not the message, is the record of
//! what was won. The entry goes first and the token only after Redis acknowledged it,
//! so a token is never stored without one; an entry without a token (the process died
//! in between) is counted by the sweeper as a write that never landed. The shard count
//! is recorded at the store's first use ([`due_shards_pin_key`]) and a store started
//! with another count refuses to start ([`super::StoreError::DueShards`]); if the pin
//! itself is gone, the index's own keys and entries decide before a new pin is written
//! ([`super::layout`]). Cost: one `ZADD` per due shard per pipeline of writes (all of
//! the pipeline's entries for that shard in it; a pipeline sent before the tokens'
//! scripts: one more round trip per batch of writes; in direct mode on a cluster one
//! more round trip per call) and a batched `ZREM` per credit batch. On a single Redis a
//! direct write is one call: the script adds the entry, then writes the token,
//! atomically ([`super::life::INDEXED_WRITE_LUA`]); a cluster keeps the due shards and
//! the users' hashes in different slots, which one script may not touch together.

use reward_runtime::keyspace::glob_escape;

/// The hash of a user's tokens in an activity: `{prefix}:{user}:{activity}`, the user
/// as its hash tag.
///
/// ```
/// use sdk::store::keys::token_key;
/// assert_eq!(token_key("tokens", "42", "cny2027"), "tokens:{42}:cny2027");
/// ```
pub fn token_key(prefix: &str, user_id: &str, activity_id: &str) -> String {
    format!("{prefix}:{{{user_id}}}:{activity_id}")
}

/// The due index shard of a user's rewards: crc32 of the user id modulo `shards` (a
/// count of 0 is read as 1).
///
/// ```
/// use sdk::store::keys::due_shard_of;
/// assert_eq!(due_shard_of("42", 64), crc32fast::hash(b"42") % 64);
/// assert_eq!(due_shard_of("42", 1), 0);
/// assert_eq!(due_shard_of("42", 0), 0);
/// ```
pub fn due_shard_of(user_id: &str, shards: u32) -> u32 {
    crc32fast::hash(user_id.as_bytes()) % shards.max(1)
}

/// The sorted set of one due index shard: `{prefix}:{due.N}` (its own hash tag, so
/// one slot).
///
/// ```
/// use sdk::store::keys::due_key;
/// assert_eq!(due_key("tokens", 7), "tokens:{due.7}");
/// ```
pub fn due_key(prefix: &str, shard: u32) -> String {
    format!("{prefix}:{{due.{shard}}}")
}

/// The due index shard key that holds a user's rewards under `shards` shards:
/// [`due_key`] of [`due_shard_of`].
///
/// ```
/// use sdk::store::keys::{due_key, due_shard_of, user_due_key};
/// assert_eq!(user_due_key("tokens", "42", 64), due_key("tokens", due_shard_of("42", 64)));
/// assert_eq!(user_due_key("tokens", "42", 1), "tokens:{due.0}");
/// ```
pub fn user_due_key(prefix: &str, user_id: &str, shards: u32) -> String {
    due_key(prefix, due_shard_of(user_id, shards))
}

/// A reward's member in the due index: `user|activity|trade` (ids never hold `|`).
///
/// ```
/// use sdk::store::keys::due_member;
/// assert_eq!(due_member("42", "cny2027", "cny2027:rain:1:42"), "42|cny2027|cny2027:rain:1:42");
/// ```
pub fn due_member(user_id: &str, activity_id: &str, trade_no: &str) -> String {
    format!("{user_id}|{activity_id}|{trade_no}")
}

/// A due index member's user, activity and trade number (`None` when it is not one):
/// the inverse of [`due_member`].
///
/// ```
/// use sdk::store::keys::parse_due_member;
/// assert_eq!(parse_due_member("42|cny2027|t1"), Some(("42", "cny2027", "t1")));
/// assert_eq!(parse_due_member("42|cny2027"), None);
/// ```
pub fn parse_due_member(member: &str) -> Option<(&str, &str, &str)> {
    let mut parts = member.splitn(3, '|');
    let (user, activity, trade) = (parts.next()?, parts.next()?, parts.next()?);
    (!user.is_empty() && !activity.is_empty() && !trade.is_empty())
        .then_some((user, activity, trade))
}

/// The key that pins the due index's shard count: `{prefix}:due-shards`.
///
/// ```
/// use sdk::store::keys::due_shards_pin_key;
/// assert_eq!(due_shards_pin_key("tokens"), "tokens:due-shards");
/// ```
pub fn due_shards_pin_key(prefix: &str) -> String {
    format!("{prefix}:due-shards")
}

/// The `SCAN MATCH` pattern of every token hash under `prefix` (not the due index's
/// keys, nor its pin): `{prefix}:{*}:*`, the prefix glob-escaped.
///
/// ```
/// use sdk::store::keys::token_pattern;
/// assert_eq!(token_pattern("tokens"), "tokens:{*}:*");
/// assert_eq!(token_pattern("t*"), r"t\*:{*}:*");
/// ```
pub fn token_pattern(prefix: &str) -> String {
    format!("{}:{{*}}:*", glob_escape(prefix))
}

/// The `SCAN MATCH` pattern of one user's token hashes in every activity:
/// `{prefix}:{user}:*`, prefix and user glob-escaped.
///
/// ```
/// use sdk::store::keys::user_token_pattern;
/// assert_eq!(user_token_pattern("tokens", "42"), "tokens:{42}:*");
/// ```
pub fn user_token_pattern(prefix: &str, user_id: &str) -> String {
    format!("{}:{{{}}}:*", glob_escape(prefix), glob_escape(user_id))
}

/// The `SCAN MATCH` pattern of every due index shard key under `prefix`:
/// `{prefix}:{due.*}`, the prefix glob-escaped.
///
/// ```
/// use sdk::store::keys::due_pattern;
/// assert_eq!(due_pattern("tokens"), "tokens:{due.*}");
/// ```
pub fn due_pattern(prefix: &str) -> String {
    format!("{}:{{due.*}}", glob_escape(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_member_splits_into_user_activity_and_trade() {
        assert_eq!(
            parse_due_member("u1|cny|cny:rain:1:u1"),
            Some(("u1", "cny", "cny:rain:1:u1"))
        );
        assert_eq!(parse_due_member("u1|cny"), None);
        assert_eq!(parse_due_member("|cny|t"), None);
        assert_eq!(parse_due_member("u||t"), None);
        assert_eq!(parse_due_member("u|a|"), None);
    }

    #[test]
    fn every_key_has_its_layout() {
        assert_eq!(token_key("p", "u", "a"), "p:{u}:a");
        assert_eq!(due_key("p", 0), "p:{due.0}");
        assert_eq!(due_shards_pin_key("p"), "p:due-shards");
        assert_eq!(due_member("u", "a", "t"), "u|a|t");
        assert_eq!(
            user_due_key("p", "u", 8),
            due_key("p", due_shard_of("u", 8))
        );
    }

    proptest! {
        // Members come from Redis: any text is parsed or refused, never a panic, and
        // what parses has three non-empty parts that join back to it.
        #[test]
        fn any_member_text_parses_or_is_refused(text in ".{0,80}") {
            if let Some((u, a, t)) = parse_due_member(&text) {
                prop_assert!(!u.is_empty() && !a.is_empty() && !t.is_empty());
                prop_assert_eq!(due_member(u, a, t), text);
            }
        }

        // A shard is always below the count.
        #[test]
        fn a_shard_is_below_its_count(user in ".{0,40}", shards in 1u32..=4096) {
            prop_assert!(due_shard_of(&user, shards) < shards);
        }
    }
}
