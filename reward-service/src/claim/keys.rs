//! The claim store's key layout, in one place: every key and `SCAN` pattern of a
//! store under a key prefix (`[claims] key_prefix`), and the parser of its keys.
//! Tools, benchmarks and the load tester build their keys with these functions too.
//!
//! ```text
//! {prefix}:meta                        the store's pin
//! {prefix}:{prefix.3}:pin              the pin of shard 3
//! {prefix}:{prefix.3}:b:{scene}        a scene's budget in shard 3
//! {prefix}:{prefix.3}:t:{trade_no}     a trade number's record (in its shard)
//! {prefix}:{prefix.3}:doubt            the doubt index of shard 3
//! ```

use reward_runtime::keyspace::{glob_escape, shard_number};

/// The shard a trade number belongs to under a store of `shards` shards
/// (`crc32(trade number) % shards`); `shards` must be positive.
///
/// ```
/// use reward_service::claim::keys::shard_of;
/// assert_eq!(shard_of("T1", 1), 0);
/// assert_eq!(shard_of("T1", 16), crc32fast::hash(b"T1") % 16);
/// ```
pub fn shard_of(trade_no: &str, shards: u32) -> u32 {
    crc32fast::hash(trade_no.as_bytes()) % shards
}

/// What every key of shard `shard` starts with: the prefix and the shard's hash tag.
///
/// ```
/// assert_eq!(reward_service::claim::keys::shard_head("rc", 3), "rc:{rc.3}");
/// ```
pub fn shard_head(prefix: &str, shard: u32) -> String {
    format!("{prefix}:{{{prefix}.{shard}}}")
}

/// The record key of a trade number in its shard (`shard_of(trade_no, shards)`).
///
/// ```
/// use reward_service::claim::keys::record_key;
/// assert_eq!(record_key("rc", 3, "T1"), "rc:{rc.3}:t:T1");
/// ```
pub fn record_key(prefix: &str, shard: u32, trade_no: &str) -> String {
    format!("{}:t:{trade_no}", shard_head(prefix, shard))
}

/// The budget key of a scene's shard.
///
/// ```
/// use reward_service::claim::keys::budget_key;
/// assert_eq!(budget_key("rc", "act/rain", 3), "rc:{rc.3}:b:act/rain");
/// ```
pub fn budget_key(prefix: &str, scene: &str, shard: u32) -> String {
    format!("{}:b:{scene}", shard_head(prefix, shard))
}

/// The doubt index of a shard (a sorted set: trade numbers held in doubt → since, ms).
///
/// ```
/// assert_eq!(reward_service::claim::keys::doubt_key("rc", 3), "rc:{rc.3}:doubt");
/// ```
pub fn doubt_key(prefix: &str, shard: u32) -> String {
    format!("{}:doubt", shard_head(prefix, shard))
}

/// The pin of a shard: the store's shard count, again, in that shard's slot.
///
/// ```
/// assert_eq!(reward_service::claim::keys::pin_key("rc", 3), "rc:{rc.3}:pin");
/// ```
pub fn pin_key(prefix: &str, shard: u32) -> String {
    format!("{}:pin", shard_head(prefix, shard))
}

/// The store's pin: a hash with fields `shards` (the count, fixed at first use) and
/// `records` (the record format).
///
/// ```
/// assert_eq!(reward_service::claim::keys::meta_key("rc"), "rc:meta");
/// ```
pub fn meta_key(prefix: &str) -> String {
    format!("{prefix}:meta")
}

/// The `SCAN` pattern of every record of the store (the prefix matched literally).
///
/// ```
/// use reward_service::claim::keys::record_pattern;
/// assert_eq!(record_pattern("rc"), "rc:{rc.*}:t:*");
/// assert_eq!(record_pattern("r*"), r"r\*:{r\*.*}:t:*");
/// ```
pub fn record_pattern(prefix: &str) -> String {
    format!("{}:t:*", shard_pattern(prefix))
}

/// The `SCAN` pattern of every key of the store that lives in a shard (records,
/// budgets, doubt indexes, shard pins; not `meta_key`).
///
/// ```
/// use reward_service::claim::keys::store_pattern;
/// assert_eq!(store_pattern("rc"), "rc:{rc.*}:*");
/// ```
pub fn store_pattern(prefix: &str) -> String {
    format!("{}:*", shard_pattern(prefix))
}

/// The pattern of a scene's budget keys in every shard (the prefix and scene matched
/// literally).
///
/// ```
/// use reward_service::claim::keys::budget_pattern;
/// assert_eq!(budget_pattern("rc", "act/rain"), "rc:{rc.*}:b:act/rain");
/// ```
pub fn budget_pattern(prefix: &str, scene: &str) -> String {
    format!("{}:b:{}", shard_pattern(prefix), glob_escape(scene))
}

/// The `SCAN` pattern of the budget keys of the previous layout (`{prefix}:{scene:N}:budget`),
/// which a store must not hold.
///
/// ```
/// use reward_service::claim::keys::old_budget_pattern;
/// assert_eq!(old_budget_pattern("rc"), "rc:{*}:budget");
/// ```
pub fn old_budget_pattern(prefix: &str) -> String {
    format!("{}:{{*}}:budget", glob_escape(prefix))
}

/// `{prefix}:{prefix.*}` with the prefix escaped: the start of every shard pattern.
fn shard_pattern(prefix: &str) -> String {
    let p = glob_escape(prefix);
    format!("{p}:{{{p}.*}}")
}

/// Splits a key of the store that lives in a shard into its shard and the rest after
/// the hash tag (`t:T1`, `b:act/rain`, `doubt`, `pin`): `None` for any other key,
/// including a shard not written as the pipeline writes it (`07`).
///
/// ```
/// use reward_service::claim::keys::shard_key_of;
/// assert_eq!(shard_key_of("rc", "rc:{rc.7}:t:T1"), Some((7, "t:T1")));
/// assert_eq!(shard_key_of("rc", "rc:{rc.7}:doubt"), Some((7, "doubt")));
/// assert_eq!(shard_key_of("rc", "rc:{rc.07}:t:T1"), None);
/// assert_eq!(shard_key_of("rc", "rc:meta"), None);
/// assert_eq!(shard_key_of("rc", "rc2:{rc2.1}:doubt"), None);
/// ```
pub fn shard_key_of<'a>(prefix: &str, key: &'a str) -> Option<(u32, &'a str)> {
    let rest = key
        .strip_prefix(prefix)?
        .strip_prefix(":{")?
        .strip_prefix(prefix)?
        .strip_prefix('.')?;
    let (n, rest) = rest.split_once("}:")?;
    Some((shard_number(n)?, rest))
}

/// The shard and trade number of a record key (a trade number may itself hold `:t:`):
/// `None` for any other key.
///
/// ```
/// use reward_service::claim::keys::record_of;
/// assert_eq!(record_of("rc", "rc:{rc.1}:t:T1:t:x"), Some((1, "T1:t:x")));
/// assert_eq!(record_of("rc", "rc:{rc.1}:b:act/rain"), None);
/// assert_eq!(record_of("rc", "other:{rc.1}:t:T1"), None);
/// ```
pub fn record_of<'a>(prefix: &str, key: &'a str) -> Option<(u32, &'a str)> {
    let (shard, rest) = shard_key_of(prefix, key)?;
    Some((shard, rest.strip_prefix("t:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_and_pattern_of_a_prefix() {
        assert_eq!(shard_of("T1", 1), 0);
        assert_eq!(shard_of("T1", 16), crc32fast::hash(b"T1") % 16);
        assert_eq!(shard_head("rc", 3), "rc:{rc.3}");
        assert_eq!(record_key("rc", 3, "T1"), "rc:{rc.3}:t:T1");
        assert_eq!(budget_key("rc", "act/rain", 3), "rc:{rc.3}:b:act/rain");
        assert_eq!(doubt_key("rc", 3), "rc:{rc.3}:doubt");
        assert_eq!(pin_key("rc", 3), "rc:{rc.3}:pin");
        assert_eq!(meta_key("rc"), "rc:meta");
        assert_eq!(record_pattern("rc"), "rc:{rc.*}:t:*");
        assert_eq!(record_pattern("r*"), r"r\*:{r\*.*}:t:*");
        assert_eq!(store_pattern("rc"), "rc:{rc.*}:*");
        assert_eq!(budget_pattern("rc", "act/rain"), "rc:{rc.*}:b:act/rain");
        assert_eq!(old_budget_pattern("rc"), "rc:{*}:budget");
    }

    #[test]
    fn keys_are_read_back_by_shard_and_trade_number() {
        assert_eq!(shard_key_of("rc", "rc:{rc.7}:t:T1"), Some((7, "t:T1")));
        assert_eq!(shard_key_of("rc", "rc:{rc.7}:doubt"), Some((7, "doubt")));
        assert_eq!(shard_key_of("rc", "rc:{rc.07}:t:T1"), None);
        assert_eq!(shard_key_of("rc", "rc:{rc.x}:t:T1"), None);
        assert_eq!(shard_key_of("rc", "rc:meta"), None);
        assert_eq!(shard_key_of("rc", "rc2:{rc2.1}:doubt"), None);
        assert_eq!(record_of("rc", "rc:{rc.1}:t:T1:t:x"), Some((1, "T1:t:x")));
        assert_eq!(record_of("rc", "rc:{rc.1}:b:act/rain"), None);
        assert_eq!(record_of("rc", "other:{rc.1}:t:T1"), None);
        let key = record_key("rc", 12, "a:b");
        assert_eq!(record_of("rc", &key), Some((12, "a:b")));
    }
}
