//! The due index's shard count proven from its data, for when its pin
//! (`{prefix}:due-shards`) is gone.
//!
//! An SDK that started with another count on a store whose pin was lost would put
//! entries in shards no sweeper reads (rewards whose event died would never be
//! compensated) and its credits would remove entries from the wrong shard. So when the
//! pin is missing, [`prove`] reads the index before a new pin is written:
//! - a key of shard N at or above the configured count proves a larger index;
//! - an entry `user|activity|trade` of shard N proves another count unless
//!   `crc32(user) % shards == N`; 32 agreeing entries prove the configured one
//!   (`reward_runtime::keyspace::ENOUGH_SAMPLES`).
//!
//! The walk is bounded (`SCAN_PAGES` pages of 1 000 slots, on one Redis or every
//! cluster primary); a start that ends without a decision is refused
//! ([`super::StoreError::DueLayoutUnproven`]) with the command that settles it,
//! `reward-ctl layout due --prefix P --shards N`.

use fred::prelude::*;
use reward_runtime::keyspace::{ENOUGH_SAMPLES, LayoutProof, Walked, glob_escape, walk};

use super::{StoreError, parse_due_member};

/// `SCAN` pages a start-up may spend proving the layout (1 000 slots each).
pub const SCAN_PAGES: u64 = 2_000;
/// Index keys whose entries are sampled, and entries read from each.
const SAMPLED_KEYS: usize = 64;
const ENTRIES_PER_KEY: i64 = 8;

/// What one key of the token store's prefix says: `None` when it is not a due index
/// key; `Some(Err(why))` when its shard proves another count; `Some(Ok((shard,
/// is_index)))` otherwise.
fn judge(prefix: &str, shards: u32, key: &str) -> Option<Result<(u32, bool), String>> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(":{due.")?;
    let (n, rest) = rest.split_once('}')?;
    let shard = reward_runtime::keyspace::shard_number(n)?;
    if !matches!(rest, "" | ":lease" | ":seen") {
        return None;
    }
    if shard >= shards {
        return Some(Err(format!(
            "it is shard {shard}, which an index of {shards} shards does not have"
        )));
    }
    Some(Ok((shard, rest.is_empty())))
}

/// Walks the due index under `prefix` (at most `max_pages` `SCAN` pages) and says
/// whether its keys and a sample of its entries agree with `shards`.
pub async fn prove(
    client: &Client,
    prefix: &str,
    shards: u32,
    max_pages: u64,
) -> Result<LayoutProof, fred::error::Error> {
    prove_with(client, prefix, shards, max_pages, |_| {}).await
}

async fn prove_with(
    client: &Client,
    prefix: &str,
    shards: u32,
    max_pages: u64,
    on_page: impl FnMut(u64),
) -> Result<LayoutProof, fred::error::Error> {
    let pattern = format!("{}:{{due.*}}*", glob_escape(prefix));
    let mut keys = 0u64;
    let mut indexes: Vec<(String, u32)> = Vec::new();
    let mut differs: Option<(String, String)> = None;
    let walked = walk(
        client,
        &pattern,
        1000,
        max_pages,
        |k| match judge(prefix, shards, k) {
            None => false,
            Some(Err(why)) => {
                differs = Some((k.to_string(), why));
                true
            }
            Some(Ok((shard, is_index))) => {
                keys += 1;
                if is_index && indexes.len() < SAMPLED_KEYS {
                    indexes.push((k.to_string(), shard));
                }
                false
            }
        },
        on_page,
    )
    .await?;
    if let Some((key, why)) = differs {
        return Ok(LayoutProof::Differs { key, why });
    }
    let mut samples = 0u64;
    for (key, shard) in &indexes {
        let members: Vec<String> = client
            .zrange(key, 0, ENTRIES_PER_KEY - 1, None, false, None, false)
            .await?;
        for m in members {
            let Some((user, _, _)) = parse_due_member(&m) else {
                continue;
            };
            let at = crc32fast::hash(user.as_bytes()) % shards;
            if at != *shard {
                return Ok(LayoutProof::Differs {
                    key: key.clone(),
                    why: format!(
                        "its entry of user {user:?} belongs in shard {at} of {shards}, but lives in shard {shard}"
                    ),
                });
            }
            samples += 1;
        }
    }
    let complete = walked == Walked::Complete;
    match (complete, keys) {
        (true, 0) => Ok(LayoutProof::Empty),
        (true, _) => Ok(LayoutProof::Agrees { samples, complete }),
        _ if samples >= ENOUGH_SAMPLES => Ok(LayoutProof::Agrees { samples, complete }),
        _ => Ok(LayoutProof::Unproven { keys, samples }),
    }
}

/// The operator's repair (`reward-ctl layout due`): walks the whole index under
/// `prefix` (no page budget; `progress` hears the `SCAN` pages read every 100) and,
/// when it agrees with `shards` or holds nothing, restores the pin. An existing pin is
/// left alone and compared. Answers what the data said.
pub async fn restore_pin(
    client: &Client,
    prefix: &str,
    shards: u32,
    mut progress: impl FnMut(u64),
) -> Result<LayoutProof, StoreError> {
    if shards == 0 || prefix.is_empty() {
        return Err(StoreError::Redis(
            "shards must be positive and the prefix set".into(),
        ));
    }
    let pin = format!("{prefix}:due-shards");
    if let Some(stored) = client.get::<Option<String>, _>(&pin).await? {
        return match stored.parse::<u32>() {
            Ok(n) if n == shards => Ok(LayoutProof::Agrees {
                samples: 0,
                complete: false,
            }),
            Ok(n) => Err(StoreError::DueShards {
                configured: shards,
                stored: n,
            }),
            Err(_) => Err(StoreError::Redis(format!(
                "{pin} holds no shard count; it is not this store's"
            ))),
        };
    }
    let proof = prove_with(client, prefix, shards, u64::MAX, |pages| {
        if pages % 100 == 0 {
            progress(pages);
        }
    })
    .await?;
    if matches!(proof, LayoutProof::Empty | LayoutProof::Agrees { .. }) {
        let _: Option<String> = client
            .set(&pin, shards.to_string(), None, Some(SetOptions::NX), false)
            .await?;
    }
    Ok(proof)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_keys_are_told_apart_and_judged_by_their_shard() {
        assert_eq!(judge("rt", 64, "rt:{due.3}"), Some(Ok((3, true))));
        assert_eq!(judge("rt", 64, "rt:{due.3}:seen"), Some(Ok((3, false))));
        assert_eq!(judge("rt", 64, "rt:{due.63}:lease"), Some(Ok((63, false))));
        assert!(matches!(judge("rt", 64, "rt:{due.64}"), Some(Err(_))));
        for other in [
            "rt:{u1}:cny",
            "rt:due-shards",
            "rt:{due.x}",
            "rt:{due.1}:other",
            "rtx:{due.1}",
        ] {
            assert_eq!(judge("rt", 64, other), None, "{other}");
        }
    }
}
