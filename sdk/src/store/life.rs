//! A reward token's life in the store, in one place: where it is kept, the states it
//! goes through, who moves it from one to the next, and the scripts that do.
//!
//! # Keys
//! A token lives in its user's hash for the activity, one field per trade number, and
//! its reward waits in the due index until credited: [`super::keys`] builds every key
//! and member. A field's value is the token's state: the sealed token (stored,
//! pending), `!` and the token (credited), or `!` alone (a mark: credited before
//! stored).
//!
//! # States of one trade number, and who moves it
//! | state | its field | due entry |
//! | --- | --- | --- |
//! | unknown | - | - |
//! | stored (waiting for its credit) | the token | yes |
//! | credited | `!` and the token | removed (or left: ended by the sweeper) |
//! | marked (credited before its write landed) | `!` | maybe |
//!
//! - **The SDK writes** ([`WRITE_LUA`], [`WRITE_MANY_LUA`], after a `ZADD NX` of the due
//!   entry): unknown -> stored, with `HSETNX`. A write that finds the field credited
//!   stores nothing pending: over a mark it stores the token credited (marked ->
//!   credited), over a credited token it does nothing. So a late or retried write never
//!   lists a credited reward as pending again. Capped at `max_tokens_per_user` pending
//!   tokens (counted field by field only once the hash holds more fields than that).
//! - **The reward service moves** ([`MOVE_MANY_LUA`], after the claim record says
//!   `GRANTED`, then a batched `ZREM` of the due entries): stored -> credited (the field
//!   rewritten in place, `!` in front); unknown -> marked (the event came before the
//!   write). A repeated move changes nothing.
//! - **The sweeper** (`reward_service::sweeper`) reads due entries past their grace: a
//!   pending token is granted through the claim store (which credits a trade number
//!   once) and then moved like any credit; a credited one only ends its entry; one in
//!   neither state waits until its write is given up.
//!
//! Two promises follow, and `sdk/tests/token_life.rs` holds them over random
//! interleavings of writes, late writes, moves and sweeps against a real Redis: a
//! credited reward is never listed pending, and the sweeper never finds a credited
//! reward to credit again.
//!
//! # Why one field, not a pending and a credited hash
//! Both states of a trade number live in its one field, so a write is `HSETNX` (it
//! cannot land over a credit: the field is there) and a move rewrites the field in
//! place (`HGET`, `HSET`). A hash per state would cost a write one more read (`HGET`
//! of the credited hash) and a move three commands and a TTL (`HSET`, `HDEL`,
//! `EXPIRE`) (`docs/scale.md`). The cap still counts pending tokens only: `HLEN` decides
//! while the hash holds no more fields than the cap, and past it (a user with many
//! credited tokens) the write counts the pending ones (`HVALS`). A credited token lives
//! as long as its hash, `ttl_secs` after the latest token written to it (the mark of a
//! credit that came first gives a new hash its TTL, and never shortens one).
//!
//! **Upgrading.** The SDK and the reward service read and write each other's fields,
//! so both move to this layout together: an SDK of the earlier layout would overwrite
//! a credit with a pending token, and a service of the earlier layout would leave its
//! marks where this SDK does not look. Neither can credit twice (the claim record
//! decides), but both can list a credited reward as pending: stop sending, let the
//! consumers drain, then start both sides on this build.
//! A sealed token is base64 and never begins with `!`. A store an earlier build wrote
//! kept credited tokens in a second hash (`{prefix}:{user}:{activity}:credited`), which
//! is no longer read: those tokens stop being listed as credited until that hash
//! expires (their claim records still say `GRANTED`, so nothing is credited again),
//! and their pending tokens read as before.

/// The first byte of a credited field: `!` and the token, or `!` alone (a mark).
pub const CREDITED: char = '!';

/// What one field of a user's hash says of its trade number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field<'a> {
    /// Stored, waiting for its credit: the sealed token.
    Pending(&'a str),
    /// Credited: the sealed token.
    Credited(&'a str),
    /// Credited before its token was stored (no token yet).
    Marked,
}

impl<'a> Field<'a> {
    /// Reads a stored field's value.
    ///
    /// ```
    /// use sdk::store::life::Field;
    /// assert_eq!(Field::of("tok"), Field::Pending("tok"));
    /// assert_eq!(Field::of("!tok"), Field::Credited("tok"));
    /// assert_eq!(Field::of("!"), Field::Marked);
    /// ```
    pub fn of(value: &'a str) -> Self {
        match value.strip_prefix(CREDITED) {
            None => Field::Pending(value),
            Some("") => Field::Marked,
            Some(token) => Field::Credited(token),
        }
    }

    /// Whether the trade number is credited (a token or a mark).
    pub fn credited(self) -> bool {
        !matches!(self, Field::Pending(_))
    }
}

/// The cap-checking write. `KEYS[1]` the user's hash; ARGV: field, value, cap, ttl
/// seconds. Returns 1 when stored (new, or there already), 0 when the cap refused it,
/// 2 when the reward is already credited (a late or retried write must not list it
/// pending again, where the wallet would offer it again).
///
/// Two commands and the TTL in the usual case (`HSETNX`, `HLEN`, `EXPIRE`); past the
/// cap in fields it counts the pending ones (`HVALS`), and a write over the cap takes
/// its field back (`HDEL`) in the same step, and a write that finds
/// its field there (a retry, or a credit that came first) reads it (`HGET`) and leaves
/// the TTL alone. Every token a
/// write adds re-arms the hash's TTL, so each lives `ttl_secs` after its write: the
/// sweeper finds a reward's token in this hash, so a hash must never expire under a
/// token that is still waiting for its credit.
pub const WRITE_LUA: &str = include_str!("lua/write.lua");

/// [`WRITE_LUA`] with the due entry first, for a single Redis (not a cluster, where
/// the due shard and the user's hashes are in different slots): `KEYS[2]` the due
/// shard, `ARGV[5]` the entry's score, `ARGV[6]` its member. A direct write is then one
/// round trip instead of two, and the entry and the token land together or not at all.
pub const INDEXED_WRITE_LUA: &str = concat!(
    include_str!("lua/index_one.lua"),
    include_str!("lua/write.lua")
);

/// [`INDEXED_WRITE_LUA`], owned.
pub fn indexed_write_lua() -> String {
    INDEXED_WRITE_LUA.to_string()
}

/// [`WRITE_LUA`] for many writes in one call (the writer task's pipelines): each
/// write decided exactly as by the single script, in order, a later write to the same
/// hash seeing the count the earlier ones left, and each hash's TTL re-armed once per
/// call. KEYS: the user's hash of each write (on a Redis Cluster, all in one slot: the
/// writer groups a pipeline's writes by their user's slot). ARGV:
/// cap, ttl seconds, then field and value of each write. Returns one reply per write:
/// 1, 0 or 2 as the single script, or the error text of a command Redis refused for
/// that write (`redis.pcall`: a key of another type fails its own write, no other).
///
/// One script call per batch instead of one per token saves a call's own overhead per
/// token. The commands go through `redis.pcall` and are checked one by one: a Lua
/// `pcall` around a closure per write costs more Redis CPU than the calls it saves
/// (`docs/findings/benchmarks-history.md`).
pub const WRITE_MANY_LUA: &str = concat!(
    include_str!("lua/write_many_prelude.lua"),
    include_str!("lua/write_many.lua")
);

/// [`WRITE_MANY_LUA`] with each write's due entry first, for a single Redis (direct
/// writes that arrive together, `super::combine`). KEYS: the user's hash of each of the
/// `n` writes, then the due shard of each. ARGV: cap, ttl seconds, field and value of
/// each write, then score and member of each write's due entry. A write whose entry
/// Redis refused (a key of another type under the shard's name) answers that error and
/// stores nothing: a token is never stored without its entry.
pub const INDEXED_WRITE_MANY_LUA: &str = concat!(
    include_str!("lua/index_many_prelude.lua"),
    include_str!("lua/write_many.lua")
);

/// KEYS: the user's hash of each token. ARGV: TTL seconds, then the trade number of
/// each. Returns per token 1 when it moved from pending to credited, 0 when it was not
/// pending (credited already, or not stored yet: then a mark is left, which gives the
/// hash its TTL; see the module doc). Two commands a token that was pending.
pub const MOVE_MANY_LUA: &str = include_str!("lua/move_many.lua");
