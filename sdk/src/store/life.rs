//! A reward token's life in the store, in one place: where it is kept, the states it
//! goes through, who moves it from one to the next, and the scripts that do.
//!
//! # Keys (one user's keys share the hash tag `{user}`, so one cluster slot)
//! ```text
//! {prefix}:{user}:{activity}            hash   pending: trade number -> sealed token
//! {prefix}:{user}:{activity}:credited   hash   credited: trade number -> sealed token,
//!                                              or "" (a mark: credited before stored)
//! {prefix}:{due.N}                      zset   due index shard N = crc32(user) % shards:
//!                                              member user|activity|trade, score = ms
//! {prefix}:due-shards                   string the due index's shard count
//! ```
//!
//! # States of one trade number, and who moves it
//! | state | pending hash | credited hash | due entry |
//! | --- | --- | --- | --- |
//! | unknown | - | - | - |
//! | stored (waiting for its credit) | token | - | yes |
//! | credited | - | token | removed (or left: ended by the sweeper) |
//! | marked (credited before its write landed) | - | `""` | maybe |
//!
//! - **The SDK writes** ([`WRITE_LUA`], [`WRITE_MANY_LUA`], after a `ZADD NX` of the due
//!   entry): unknown -> stored. A write that finds the trade number credited stores
//!   nothing pending: over a mark it puts the token in the credited hash (marked ->
//!   credited), over a token it does nothing. So a late or retried write never lists a
//!   credited reward as pending again. Capped at `max_tokens_per_user` pending.
//! - **The reward service moves** ([`MOVE_MANY_LUA`], after the claim record says
//!   `GRANTED`, then a batched `ZREM` of the due entries): stored -> credited; unknown
//!   -> marked (the event came before the write). A repeated move changes nothing.
//! - **The sweeper** (`reward_service::sweeper`) reads due entries past their grace: a
//!   pending token is granted through the claim store (which credits a trade number
//!   once) and then moved like any credit; a credited one only ends its entry; one in
//!   neither hash waits until its write is given up.
//!
//! Two promises follow, and `sdk/tests/token_life.rs` holds them over random
//! interleavings of writes, late writes, moves and sweeps against a real Redis: a
//! credited reward is never listed pending, and the sweeper never finds a credited
//! reward to credit again.

/// The cap-checking write. `KEYS[1]` the pending hash, `KEYS[2]` its credited hash (same
/// hash tag); ARGV: field, value, cap, ttl seconds. Returns 1 when stored (new or
/// replaced), 0 when the cap refused it, 2 when the reward is already credited (its
/// token was moved to the credited hash: a late or retried write must not put it back
/// in the pending list, where the wallet would offer it again).
///
/// Three commands and the TTL in the usual case (`HGET`, `HLEN`, `HSET`, `EXPIRE`):
/// the field check (`HEXISTS`) runs only when the hash is at its cap, and a write that
/// only replaces a token already there (a retry) leaves the TTL alone. Every token a
/// write adds re-arms the hash's TTL, so each lives `ttl_secs` after its write: the
/// sweeper finds a reward's token in this hash, so a hash must never expire under a
/// token that is still waiting for its credit.
pub const WRITE_LUA: &str = include_str!("lua/write.lua");

/// [`WRITE_LUA`] with the due entry first, for a single Redis (not a cluster, where
/// the due shard and the user's hashes are in different slots): `KEYS[3]` the due
/// shard, `ARGV[5]` the entry's score, `ARGV[6]` its member. A direct write is then one
/// round trip instead of two, and the entry and the token land together or not at all.
pub fn indexed_write_lua() -> String {
    format!("redis.call('ZADD', KEYS[3], 'NX', ARGV[5], ARGV[6])\n{WRITE_LUA}")
}

/// [`WRITE_LUA`] for many writes in one call (the writer task's pipelines): each
/// write decided exactly as by the single script, in order, a later write to the same
/// hash seeing the count the earlier ones left, and each hash's TTL re-armed once per
/// call. KEYS: pending and credited hash of each write, in pairs (on a Redis Cluster,
/// all in one slot: the writer groups a pipeline's writes by their user's slot). ARGV:
/// cap, ttl seconds, then field and value of each write. Returns one reply per write:
/// 1, 0 or 2 as the single script, or the error text of a command Redis refused for
/// that write (`redis.pcall`: a key of another type fails its own write, no other).
///
/// One script call per batch instead of one per token saves a call's own overhead per
/// token. The commands go through `redis.pcall` and are checked one by one; a Lua
/// `pcall` around a closure per write cost more Redis CPU than the calls it saved
/// (measured: `docs/findings/benchmarks-history.md`).
pub const WRITE_MANY_LUA: &str = include_str!("lua/write_many.lua");

/// KEYS: pending and credited hash of each token, in pairs. ARGV: TTL seconds, then
/// the trade number of each pair. Returns per pair 1 when the token moved, 0 when the
/// pending hash did not hold it (an empty mark is left in the credited hash, see the
/// module doc); each credited hash gets its TTL once per call.
pub const MOVE_MANY_LUA: &str = include_str!("lua/move_many.lua");
