//! The Lua scripts the claim store runs in Redis (one file each under `lua/`, whose
//! header says its keys, arguments and answer): claim, batch claim, finish, release,
//! doubt-index sweep, budget hold and budget moves between shards; the store's loaded
//! handles to them; and the packing of a grant's fields for the batch scripts.

use fred::prelude::Pool;
use reward_runtime::script::Script;

/// The Lua helpers every record script starts with (`lua/record.lua`): a record is one
/// string of ten lines (`amount`, `scene`, `user`, `type`, `activity`, `state`,
/// `lease`, `owner`, `clean`, `result`; the module doc of [`super`] says why one
/// string), `rec_parse` splits one (nil when it is not a record), `rec_join` makes one,
/// `bad_budget` tells a budget the claim scripts must refuse before any write.
macro_rules! record_lua {
    () => {
        include_str!("lua/record.lua")
    };
}

/// The Lua helper of the scripts that take a grant's fields packed ([`pack_fields`],
/// `lua/fields.lua`): `unpack_fields(arg, want)` unpacks one argument and answers its
/// fields when they are exactly `want` strings, `nil` otherwise (a missing argument,
/// bytes that are not MessagePack, another count, or a value that is not a string,
/// such as the nil a field too long for a header packs to). `cmsgpack.unpack` raises a
/// Lua error on bytes it cannot read; the scripts call it before their first write, so
/// that error too leaves everything as it was.
macro_rules! fields_lua {
    () => {
        include_str!("lua/fields.lua")
    };
}

/// [`fields_lua!`] as text, for the scripts outside this module that take packed
/// fields (the built-in ledger's).
pub const FIELDS_LUA: &str = fields_lua!();

/// The claim script (public for benchmarks that run it bare, e.g. `redis-benchmark`).
/// KEYS: record, budget. ARGV: user, type, amount, lease ms, retention s, claim id,
/// scene, activity. A new trade number whose budget has room costs one command besides
/// the budget's: `SET NX GET EX` creates the record, or answers the one there.
pub const CLAIM_LUA: &str = concat!(record_lua!(), include_str!("lua/claim.lua"));

/// The claim script for many grants at once, of any scenes and shards (on a Redis
/// Cluster the caller keeps one call's keys in one slot, so one shard): each grant is
/// decided exactly as by [`CLAIM_LUA`], in order, and each budget's `spent` moves once.
/// KEYS: per grant its record, then its budget. ARGV: lease ms, retention s, then per
/// grant one argument, its fields [`pack_fields`]ed: scene, activity, user, type, amount,
/// claim id. Returns code, detail per grant.
///
/// A new trade number costs one command (`SET NX GET EX`: created, or the record there
/// comes back to be judged); only a grant the budget would refuse reads first (`GET`),
/// so a refusal writes nothing. Each budget is read once (`HMGET`) and moved once
/// (`HINCRBY`). Redis does not roll a script back when it fails midway: every amount is
/// checked and every budget read before any write (a wrong-typed budget, or one whose
/// `spent` is not an integer or `hold` not a number, fails the whole call there),
/// and the script sends the record commands through Redis's protected call, so a key
/// of another type under a record's name undoes what this call wrote (records it
/// created deleted, records it took over put back) before the error is answered: a
/// call changes nothing or all it decided.
pub(super) const CLAIM_MANY_LUA: &str = concat!(
    record_lua!(),
    fields_lua!(),
    include_str!("lua/claim_many.lua")
);

/// Marks grants `GRANTED` (a receipt proves the credit, so no lease is needed: any
/// `IN_PROGRESS` or `IN_DOUBT` record takes it) or `FAILED` (only by the owner of a
/// live claim; refunded). KEYS: per grant its record, its budget and its shard's doubt
/// index (grants of any shards; on a Redis Cluster the caller keeps a call to one).
/// ARGV: retention s, re-arm after ms ([`REARM_AFTER_MS`]), then per grant one
/// argument, its fields [`pack_fields`]ed: claim id, final state, trade no, amount, scene,
/// user, type, activity, result.
/// Returns per grant 1 (done, or already GRANTED for a grant) or 0 (not this
/// claim's, or no record).
///
/// The usual finish is one command: `SET XX GET KEEPTTL` writes the final record and
/// answers the one it replaced, which is then judged; a record this finish may not
/// change (finished already, another owner's, another grant's) is put back as it was
/// in the same script, so nobody ever reads the replaced value.
pub(super) const FINISH_MANY_LUA: &str = concat!(
    record_lua!(),
    fields_lua!(),
    include_str!("lua/finish_many.lua")
);

/// Gives a claim up. KEYS: record, doubt index. ARGV: claim id, mode, hold ms,
/// trade no. Mode `clean`: nothing was credited; the next claim credits at once.
/// Mode `doubt`: the credit may have happened; the record becomes `IN_DOUBT`, is
/// listed in the doubt index, and stays leased for `hold` ms (so the earlier call
/// has settled before anyone resolves it). The deduction stands either way.
pub(super) const RELEASE_LUA: &str = concat!(record_lua!(), include_str!("lua/release.lua"));

/// Drops a doubt-index entry whose record is no longer in doubt (settled, or
/// expired), in one step with the check, so a record put back in doubt meanwhile keeps
/// its entry. KEYS: doubt index, record. ARGV: trade no. Returns 1 if it dropped it.
pub(super) const SWEEP_LUA: &str = concat!(record_lua!(), include_str!("lua/sweep.lua"));

/// Reads a record (through a script, so the reply is proven to be this read's:
/// `reward_runtime::script`). KEYS: record.
pub(super) const GET_LUA: &str = include_str!("lua/get.lua");

/// Holds a budget shard for a change. KEYS: budget. ARGV: hold ms, holder id.
/// Returns spent, or -1 when another holder's hold is live.
pub(super) const HOLD_LUA: &str = include_str!("lua/hold.lua");

/// Ends a hold, setting the cap when one is given. KEYS: budget. ARGV: holder id,
/// cap or ''. Returns 1, or 0 when the hold is no longer this holder's or has lapsed
/// (spending may have resumed, so a cap computed from the held spending is stale).
/// A cap set records the holder id as the shard's `set`: which exact division of the
/// total the cap belongs to (ids are unique per set, so two shards carry the same one
/// only when the same set gave both their caps).
pub(super) const UNHOLD_LUA: &str = include_str!("lua/unhold.lua");

/// Lends a shard's unspent budget to another shard of its scene (the first half of a
/// move, [`LEND_LUA`] then [`BORROW_LUA`]). KEYS: budget. ARGV: most to lend, the
/// borrower's `set`. Lowers the cap by what it lends (at most the shard's headroom)
/// and returns `{lent, 0}`; lends nothing and returns `{0, ms}` while a budget change
/// holds it (`ms` left on the hold), `{0, -1}` when its cap belongs to another set
/// than the borrower's (a change reached one and not the other: their caps are not
/// one division of one total, so nothing moves between them).
pub(super) const LEND_LUA: &str = include_str!("lua/lend.lua");

/// Takes what [`LEND_LUA`] lent into the shard that ran out (the second half of a
/// move). KEYS: budget. ARGV: amount, the `set` both shards had. Raises the cap and
/// returns 1; returns 0 and changes nothing while a change holds the shard or when a
/// change gave it a cap since (its `set` differs): that change divided the total
/// afresh, counting the lent units among the lender's if it reached the lender, and
/// leaving them stranded (never spendable twice) until the next change if not.
pub(super) const BORROW_LUA: &str = include_str!("lua/borrow.lua");

/// One grant's fields for the batch scripts, as one argument: a MessagePack string
/// object each, one after the other, which the script's `cmsgpack.unpack` (built into
/// Redis's Lua) turns back into the fields. [`CLAIM_MANY_LUA`] and [`FINISH_MANY_LUA`]
/// take a grant's fields this way, not one argument a field: the Redis client builds,
/// copies, encodes and frees every argument on its own, so one argument a grant costs
/// it one of each, and Redis unpacks it in C. Any bytes go through: the lengths are in
/// the headers. A field too long for a header (4 GiB; Redis takes no argument over
/// 512 MiB anyway) goes as a MessagePack nil, never as a short header over the whole
/// field: the scripts refuse a grant whose fields are not all strings ([`FIELDS_LUA`])
/// before their first write.
pub fn pack_fields(fields: &[&str]) -> Vec<u8> {
    let mut out = Vec::with_capacity(fields.iter().map(|f| f.len() + 5).sum());
    for f in fields {
        let n = f.len();
        // str formats: fixstr, str 8, str 16, str 32 (big-endian lengths).
        if n < 32 {
            out.push(0xa0 | n as u8);
        } else if let Ok(n) = u8::try_from(n) {
            out.extend_from_slice(&[0xd9, n]);
        } else if let Ok(n) = u16::try_from(n) {
            out.push(0xda);
            out.extend_from_slice(&n.to_be_bytes());
        } else if let Ok(n) = u32::try_from(n) {
            out.push(0xdb);
            out.extend_from_slice(&n.to_be_bytes());
        } else {
            out.push(0xc0);
            continue;
        }
        out.extend_from_slice(f.as_bytes());
    }
    out
}

/// A finish re-arms a record's TTL only when its lease ended longer ago than this
/// (or it was in doubt): a credit finished within its lease keeps the TTL its claim
/// set moments before, which saves an `EXPIRE` per grant.
pub(super) const REARM_AFTER_MS: u64 = 3_600_000;

/// The claim store's scripts, loaded once per store.
#[derive(Debug)]
pub(super) struct Scripts {
    pub(super) claim: Script,
    pub(super) release: Script,
    pub(super) claim_many: Script,
    pub(super) finish_many: Script,
    pub(super) hold: Script,
    pub(super) unhold: Script,
    pub(super) lend: Script,
    pub(super) borrow: Script,
    pub(super) sweep: Script,
    /// Reads of budgets that decide money ([`reward_runtime::script::HMGET_LUA`]).
    pub(super) hmget: Script,
    /// Reads of a record ([`GET_LUA`]).
    pub(super) get: Script,
}

impl Scripts {
    /// Loads every script of the store on `pool`'s connections.
    pub(super) async fn load(pool: &Pool) -> Result<Self, fred::error::Error> {
        let load = |script: &'static str| {
            let client = pool.next().clone();
            async move { Script::load(&client, script).await }
        };
        let (claim, release, claim_many, finish_many, hold, unhold, sweep) = tokio::try_join!(
            load(CLAIM_LUA),
            load(RELEASE_LUA),
            load(CLAIM_MANY_LUA),
            load(FINISH_MANY_LUA),
            load(HOLD_LUA),
            load(UNHOLD_LUA),
            load(SWEEP_LUA),
        )?;
        let (lend, borrow, hmget, get) = tokio::try_join!(
            load(LEND_LUA),
            load(BORROW_LUA),
            load(reward_runtime::script::HMGET_LUA),
            load(GET_LUA),
        )?;
        Ok(Self {
            claim,
            release,
            claim_many,
            finish_many,
            hold,
            unhold,
            lend,
            borrow,
            sweep,
            hmget,
            get,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::pack_fields;

    #[test]
    fn each_field_gets_the_smallest_string_header() {
        assert_eq!(pack_fields(&[]), Vec::<u8>::new());
        assert_eq!(pack_fields(&["", "ab"]), vec![0xa0, 0xa2, b'a', b'b']);
        let f31 = "x".repeat(31);
        assert_eq!(pack_fields(&[&f31])[0], 0xbf);
        let f32 = "x".repeat(32);
        assert_eq!(pack_fields(&[&f32])[..2], [0xd9, 32]);
        let f255 = "x".repeat(255);
        assert_eq!(pack_fields(&[&f255])[..2], [0xd9, 255]);
        let f256 = "x".repeat(256);
        assert_eq!(pack_fields(&[&f256])[..3], [0xda, 1, 0]);
        let f65536 = "x".repeat(65_536);
        let p = pack_fields(&[&f65536]);
        assert_eq!(p[..5], [0xdb, 0, 1, 0, 0]);
        assert_eq!(p.len(), 5 + 65_536);
    }
}
