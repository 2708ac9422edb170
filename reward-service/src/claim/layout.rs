//! The claim store's shard count proven from its data, for when its pin
//! (`{prefix}:meta`) is gone: a clean-up that took one key too many, a flush of one
//! slot, a failover that lost the last write.
//!
//! # Why the pin alone is not enough
//! The shard count decides where each trade number's record lives. An instance that
//! started with another count on a store whose pin was lost would look in the wrong
//! shard, find no record, and credit a redelivered event a second time. So when the
//! pin is missing, [`prove`] reads the store's own keys before a new pin is written:
//! - a key in a shard at or above the configured count proves a larger layout;
//! - a record key `…:{prefix.N}:t:{trade}` proves its layout unless
//!   `crc32(trade) % shards == N` (about half of the records of any other count fail
//!   this, so 32 that pass leave at most a 2^-32 chance that the count is wrong);
//! - after a complete walk, a scene whose budget keys stop below the configured count
//!   proves a smaller layout (a budget is always set on every shard).
//!
//! The walk is bounded ([`SCAN_PAGES`] `SCAN` pages of 1 000 slots, on one Redis or
//! across every cluster primary), so a start never hangs on a large keyspace. When it
//! ends without enough evidence either way the start is refused
//! ([`super::ClaimError::LayoutUnproven`]) with the command that settles it:
//! `reward-ctl layout claims --shards N`, which walks the whole store with progress
//! and writes the pin only if the data agrees.

use std::collections::HashMap;

use fred::prelude::*;
use reward_runtime::keyspace::{LayoutProof, Walked, glob_escape, walk};

/// `SCAN` pages a start-up may spend proving the layout (1 000 slots each).
pub const SCAN_PAGES: u64 = 2_000;
/// Records that agree with the configured count and prove it on their own.
pub const ENOUGH_RECORDS: u64 = reward_runtime::keyspace::ENOUGH_SAMPLES;

/// What one key says.
#[derive(Debug, PartialEq, Eq)]
enum Key<'a> {
    /// Not a claim-store key of this prefix.
    Other,
    /// A record whose shard matches its trade number under the count.
    Record,
    /// A budget key of `scene` in shard `shard`.
    Budget { scene: &'a str, shard: u32 },
    /// Another key of the store (a doubt index).
    Store,
    /// A key that proves another count.
    Differs(String),
}

fn judge<'a>(prefix: &str, shards: u32, key: &'a str) -> Key<'a> {
    let Some(rest) = key
        .strip_prefix(prefix)
        .and_then(|r| r.strip_prefix(":{"))
        .and_then(|r| r.strip_prefix(prefix))
        .and_then(|r| r.strip_prefix('.'))
    else {
        return Key::Other;
    };
    let Some((n, rest)) = rest.split_once("}:") else {
        return Key::Other;
    };
    let Some(shard) = reward_runtime::keyspace::shard_number(n) else {
        return Key::Other;
    };
    if shard >= shards {
        return Key::Differs(format!(
            "it lives in shard {shard}, which a store of {shards} shards does not have"
        ));
    }
    if let Some(trade) = rest.strip_prefix("t:") {
        let at = crc32fast::hash(trade.as_bytes()) % shards;
        return if at == shard {
            Key::Record
        } else {
            Key::Differs(format!(
                "its trade number belongs in shard {at} of {shards}, but it lives in shard {shard}"
            ))
        };
    }
    if let Some(scene) = rest.strip_prefix("b:") {
        return Key::Budget { scene, shard };
    }
    Key::Store
}

/// Walks the store under `prefix` (at most `max_pages` `SCAN` pages) and says whether
/// its keys agree with `shards`.
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
    let p = glob_escape(prefix);
    let pattern = format!("{p}:{{{p}.*}}:*");
    let (mut keys, mut records) = (0u64, 0u64);
    let mut differs: Option<(String, String)> = None;
    // Per scene, the highest budget shard seen.
    let mut budgets: HashMap<String, u32> = HashMap::new();
    let walked = walk(
        client,
        &pattern,
        1000,
        max_pages,
        |k| match judge(prefix, shards, k) {
            Key::Other => false,
            Key::Record => {
                keys += 1;
                records += 1;
                false
            }
            Key::Budget { scene, shard } => {
                keys += 1;
                let top = budgets.entry(scene.to_string()).or_default();
                *top = (*top).max(shard);
                false
            }
            Key::Store => {
                keys += 1;
                false
            }
            Key::Differs(why) => {
                differs = Some((k.to_string(), why));
                true
            }
        },
        on_page,
    )
    .await?;
    if let Some((key, why)) = differs {
        return Ok(LayoutProof::Differs { key, why });
    }
    let complete = walked == Walked::Complete;
    if complete {
        if let Some((scene, top)) = budgets.iter().find(|(_, top)| **top + 1 < shards) {
            return Ok(LayoutProof::Differs {
                key: format!("{prefix}:{{{prefix}.*}}:b:{scene}"),
                why: format!(
                    "the budget of scene {scene} stops at shard {top}: it was set on a store of {} shards, not {shards}",
                    top + 1
                ),
            });
        }
        if keys == 0 {
            return Ok(LayoutProof::Empty);
        }
        return Ok(LayoutProof::Agrees {
            samples: records,
            complete,
        });
    }
    if records >= ENOUGH_RECORDS {
        return Ok(LayoutProof::Agrees {
            samples: records,
            complete,
        });
    }
    Ok(LayoutProof::Unproven {
        keys,
        samples: records,
    })
}

/// The operator's repair (`reward-ctl layout claims`): walks the whole store under
/// `prefix` (no page budget; `progress` hears the `SCAN` pages read every 100)
/// and, when its data agrees with `shards` or holds nothing, restores the pin. An
/// existing pin is left alone and compared. Answers what the data said.
pub async fn restore_pin(
    client: &Client,
    prefix: &str,
    shards: u32,
    mut progress: impl FnMut(u64),
) -> Result<LayoutProof, super::ClaimError> {
    if shards == 0 || prefix.is_empty() || prefix.contains(['{', '}']) {
        return Err(super::ClaimError::Invalid(
            "shards must be positive and the prefix set, without braces",
        ));
    }
    let meta = format!("{prefix}:meta");
    if let Some(stored) = client.hget::<Option<String>, _, _>(&meta, "shards").await? {
        return match stored.parse::<u32>() {
            Ok(n) if n == shards => Ok(LayoutProof::Agrees {
                samples: 0,
                complete: false,
            }),
            Ok(n) => Err(super::ClaimError::ShardsChanged {
                prefix: prefix.to_string(),
                configured: shards,
                stored: n,
            }),
            Err(_) => Err(super::ClaimError::Reply(vec![format!(
                "{meta} holds no readable shard count"
            )])),
        };
    }
    let proof = prove_with(client, prefix, shards, u64::MAX, |pages| {
        if pages % 100 == 0 {
            progress(pages);
        }
    })
    .await?;
    if matches!(proof, LayoutProof::Empty | LayoutProof::Agrees { .. }) {
        let _: i64 = client.hsetnx(&meta, "shards", shards).await?;
    }
    Ok(proof)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_judged_by_their_shard_and_trade_number() {
        let shards = 16;
        let trade = "cny:rain:1:u42";
        let at = crc32fast::hash(trade.as_bytes()) % shards;
        let other = (at + 1) % shards;
        assert_eq!(
            judge("cl", shards, &format!("cl:{{cl.{at}}}:t:{trade}")),
            Key::Record
        );
        assert!(matches!(
            judge("cl", shards, &format!("cl:{{cl.{other}}}:t:{trade}")),
            Key::Differs(_)
        ));
        assert!(matches!(
            judge("cl", shards, "cl:{cl.16}:doubt"),
            Key::Differs(_)
        ));
        assert_eq!(judge("cl", shards, "cl:{cl.15}:doubt"), Key::Store);
        assert_eq!(
            judge("cl", shards, "cl:{cl.3}:b:cny/rain"),
            Key::Budget {
                scene: "cny/rain",
                shard: 3
            }
        );
        for other in [
            "cl:meta",
            "cl2:{cl2.1}:doubt",
            "cl:{cl.x}:doubt",
            "cl:{cl.1}",
            "x",
        ] {
            assert_eq!(judge("cl", shards, other), Key::Other, "{other}");
        }
    }
}
