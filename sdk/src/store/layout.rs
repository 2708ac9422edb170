//! The due index's shard count: pinned at the store's first use and checked at each
//! start (`check_pin`), and proven from the index's data when its pin
//! ([`due_shards_pin_key`]) is gone.
//!
//! An SDK that started with another count on a store whose pin was lost would put
//! entries in shards no sweeper reads (rewards whose event died would never be
//! compensated) and its credits would remove entries from the wrong shard. So when the
//! pin is missing, [`prove`] reads the index before a new pin is written. Its keys are
//! few and known in advance (`{prefix}:{due.N}`, N below `MAX_DUE_SHARDS` = 4 096, the
//! most `store.due_shards` allows), so it asks for each of them directly, one pipeline
//! of 4 096 `EXISTS` (routed per key on a cluster), rather than scanning a keyspace
//! that may hold millions of tokens: the answer is complete, and its cost does not
//! grow with the tokens stored.
//! - an index key of shard N at or above the configured count proves a larger count;
//! - an entry `user|activity|trade` of shard N proves another count unless
//!   `crc32(user) % shards == N` (up to 8 entries of up to 64 keys are read);
//! - no index key at all: a fresh index, or one with nothing due (every reward
//!   credited). Either way any count starts it: nothing can be left in a shard no
//!   sweeper reads.
//!
//! A count larger than the index's own, with only agreeing entries seen, is accepted:
//! the sweepers then read every old shard and more, and a stale entry in a shard the
//! new count does not use is ended by the sweeper as already credited.

use fred::prelude::*;
use reward_runtime::keyspace::LayoutProof;

use super::error::StoreError;
use super::keys::{due_key, due_shard_of, due_shards_pin_key, parse_due_member};

/// The most shards a due index can have (`store.due_shards` is 1..=4096).
pub const MAX_DUE_SHARDS: u32 = 4096;
/// Index keys whose entries are sampled, and entries read from each.
const SAMPLED_KEYS: usize = 64;
const ENTRIES_PER_KEY: i64 = 8;

/// Whether an index key of shard `shard` fits a count of `shards`.
fn judge(shard: u32, shards: u32) -> Result<(), String> {
    if shard >= shards {
        return Err(format!(
            "it is shard {shard}, which an index of {shards} shards does not have"
        ));
    }
    Ok(())
}

/// Reads the due index under `prefix` (every possible index key, asked for by name)
/// and says whether it agrees with `shards`.
pub async fn prove(
    client: &Client,
    prefix: &str,
    shards: u32,
) -> Result<LayoutProof, fred::error::Error> {
    let key = |n: u32| due_key(prefix, n);
    let pipe = client.pipeline();
    for n in 0..MAX_DUE_SHARDS {
        let _: () = pipe.exists(key(n)).await?;
    }
    let found: Vec<i64> = pipe.all().await?;
    let present: Vec<u32> = (0..MAX_DUE_SHARDS)
        .zip(found)
        .filter(|(_, n)| *n > 0)
        .map(|(n, _)| n)
        .collect();
    if present.is_empty() {
        return Ok(LayoutProof::Empty);
    }
    if let Some(&n) = present.iter().find(|&&n| n >= shards) {
        let why = judge(n, shards).err().unwrap_or_default();
        return Ok(LayoutProof::Differs { key: key(n), why });
    }
    let mut samples = 0u64;
    for &shard in present.iter().take(SAMPLED_KEYS) {
        let k = key(shard);
        let members: Vec<String> = client
            .zrange(&k, 0, ENTRIES_PER_KEY - 1, None, false, None, false)
            .await?;
        for m in members {
            let Some((user, _, _)) = parse_due_member(&m) else {
                continue;
            };
            let at = due_shard_of(user, shards);
            if at != shard {
                return Ok(LayoutProof::Differs {
                    key: k,
                    why: format!(
                        "its entry of user {user:?} belongs in shard {at} of {shards}, but lives in shard {shard}"
                    ),
                });
            }
            samples += 1;
        }
    }
    Ok(LayoutProof::Agrees {
        samples,
        complete: true,
    })
}

/// Records the due index's shard count at the store's first use and refuses another
/// one later: entries under a different count would sit in shards no sweeper reads.
/// The outer error is Redis not answering (asked again at the store's start); the
/// inner one is the store's answer (a layout that refuses), never asked again.
pub(super) async fn check_pin(
    client: &Client,
    prefix: &str,
    shards: u32,
) -> Result<Result<(), StoreError>, fred::error::Error> {
    let key = due_shards_pin_key(prefix);
    let pinned: Option<String> = client.get(&key).await?;
    if pinned.is_none() {
        // No pin: a fresh store, or one whose pin was lost. The index itself decides.
        match prove(client, prefix, shards).await? {
            LayoutProof::Empty => {}
            LayoutProof::Agrees { samples, complete } => {
                tracing::warn!(
                    prefix,
                    shards,
                    entries = samples,
                    complete,
                    "due index shard pin was missing; the index agrees with store.due_shards, pin restored"
                );
            }
            LayoutProof::Differs { key, why } => {
                return Ok(Err(StoreError::DueLayoutDiffers {
                    prefix: prefix.to_string(),
                    configured: shards,
                    key,
                    why,
                }));
            }
            LayoutProof::Unproven { keys, samples } => {
                return Ok(Err(StoreError::DueLayoutUnproven {
                    prefix: prefix.to_string(),
                    configured: shards,
                    keys,
                    samples,
                }));
            }
        }
    }
    let _: Option<String> = client
        .set(&key, shards.to_string(), None, Some(SetOptions::NX), false)
        .await?;
    let stored: Option<String> = client.get(&key).await?;
    Ok(match stored.as_deref().map(str::parse::<u32>) {
        Some(Ok(n)) if n == shards => Ok(()),
        Some(Ok(n)) => Err(StoreError::DueShards {
            configured: shards,
            stored: n,
        }),
        _ => Err(StoreError::Redis(format!(
            "{key} holds no shard count; it is not this store's"
        ))),
    })
}

/// The operator's repair (`reward-ctl layout due`): reads the whole index under
/// `prefix` as [`prove`] does (`progress` hears when it starts) and, when it agrees
/// with `shards` or holds nothing, restores the pin. An existing pin is
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
    let pin = due_shards_pin_key(prefix);
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
    progress(0);
    let proof = prove(client, prefix, shards).await?;
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
    fn an_index_key_beyond_the_count_proves_a_larger_index() {
        assert!(judge(3, 64).is_ok());
        assert!(judge(63, 64).is_ok());
        assert!(judge(64, 64).is_err());
        assert!(judge(4095, 8).unwrap_err().contains("shard 4095"));
    }
}
