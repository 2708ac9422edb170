//! The claim store's shard count proven from its data, for when its pin
//! (`{prefix}:meta`) is gone: a clean-up that took one key too many, a flush of one
//! slot, a failover that lost the last write.
//!
//! # Why the pin alone is not enough
//! The shard count decides where each trade number's record lives. An instance that
//! started with another count on a store whose pin was lost would look in the wrong
//! shard, find no record, and credit a redelivered event a second time. So when the
//! pin is missing, [`prove`] reads the store before a new pin is written:
//! 1. **The shard pins.** Every start also writes `{prefix}:{prefix.N}:pin` (the count)
//!    in each shard's own slot ([`write_shard_pins`]): one lost key, or one lost slot,
//!    leaves the others. They are read by name (one pipeline of `shards` `GET`s): one
//!    that names another count proves it; one that names this count agrees.
//! 2. **The data**, when no shard pin is left (a store written before they existed,
//!    or a wipe of every pin): a bounded `SCAN` ([`SCAN_PAGES`] pages of 1 000 slots,
//!    on one Redis or across every cluster primary) for the store's keys:
//!    - a key in a shard at or above the configured count proves a larger layout;
//!    - a record key `…:{prefix.N}:t:{trade}` proves its layout unless
//!      `crc32(trade) % shards == N` (about half of the records of any other count
//!      fail this, so 32 that pass leave at most a 2^-32 chance that the count is
//!      wrong);
//!    - after a complete walk, a scene whose budget keys stop below the configured
//!      count proves a smaller layout (a budget is always set on every shard).
//!
//! A walk that runs out of pages having seen some of the store's keys but too few
//! records to decide refuses the start ([`ClaimError::LayoutUnproven`]) with the
//! command that settles it: `reward-ctl layout claims --prefix P --shards N`, which
//! walks the whole store with progress and writes the pins only if the data agrees.
//! One that runs out of pages having seen none of them takes the store as new: on a
//! large shared Redis a new prefix must start without an operator, and losing the pin
//! of every shard as well as `{prefix}:meta` while keeping data beyond the first two
//! million keys scanned is the one case this does not catch.

use std::collections::HashMap;

use fred::prelude::*;
use reward_runtime::keyspace::{LayoutProof, Walked, walk};

use super::error::ClaimError;
use super::keys;

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
    let Some((shard, rest)) = keys::shard_key_of(prefix, key) else {
        return Key::Other;
    };
    if shard >= shards {
        return Key::Differs(format!(
            "it lives in shard {shard}, which a store of {shards} shards does not have"
        ));
    }
    if let Some(trade) = rest.strip_prefix("t:") {
        let at = keys::shard_of(trade, shards);
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

/// Writes each shard's pin (`SET NX`, so an existing one is kept): every start does,
/// so the pins outlive the loss of any one key or slot.
pub async fn write_shard_pins(
    client: &Client,
    prefix: &str,
    shards: u32,
) -> Result<(), fred::error::Error> {
    let pipe = client.pipeline();
    for n in 0..shards {
        let _: () = pipe
            .set(
                keys::pin_key(prefix, n),
                shards,
                None,
                Some(SetOptions::NX),
                false,
            )
            .await?;
    }
    let _: Vec<Value> = pipe.all().await?;
    Ok(())
}

/// What the shard pins say: `None` when there is none.
async fn from_shard_pins(
    client: &Client,
    prefix: &str,
    shards: u32,
) -> Result<Option<LayoutProof>, fred::error::Error> {
    let pipe = client.pipeline();
    for n in 0..shards {
        let _: () = pipe.get(keys::pin_key(prefix, n)).await?;
    }
    let pins: Vec<Option<String>> = pipe.all().await?;
    let mut agreeing = 0u64;
    for (n, pin) in (0..shards).zip(pins) {
        match pin.as_deref().map(str::parse::<u32>) {
            None => {}
            Some(Ok(count)) if count == shards => agreeing += 1,
            Some(other) => {
                let says = other.map_or_else(
                    |_| "something unreadable".to_string(),
                    |c| format!("{c} shards"),
                );
                return Ok(Some(LayoutProof::Differs {
                    key: keys::pin_key(prefix, n),
                    why: format!("the pin of shard {n} says the store has {says}"),
                }));
            }
        }
    }
    Ok((agreeing > 0).then_some(LayoutProof::Agrees {
        samples: agreeing,
        complete: false,
    }))
}

/// Reads the shard pins, else walks the store under `prefix` (at most `max_pages`
/// `SCAN` pages), and says whether it agrees with `shards`.
pub async fn prove(
    client: &Client,
    prefix: &str,
    shards: u32,
    max_pages: u64,
) -> Result<LayoutProof, fred::error::Error> {
    if let Some(proof) = from_shard_pins(client, prefix, shards).await? {
        return Ok(proof);
    }
    prove_with(client, prefix, shards, max_pages, |_| {}).await
}

async fn prove_with(
    client: &Client,
    prefix: &str,
    shards: u32,
    max_pages: u64,
    on_page: impl FnMut(u64),
) -> Result<LayoutProof, fred::error::Error> {
    let pattern = keys::store_pattern(prefix);
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
                key: keys::budget_pattern(prefix, scene),
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
    if keys == 0 {
        // Nothing of the store within the pages read: taken as new (module doc).
        tracing::warn!(
            prefix,
            pages = max_pages,
            "claim store: no pin and no key of it within the pages a start reads; taken as a new store"
        );
        return Ok(LayoutProof::Empty);
    }
    Ok(LayoutProof::Unproven {
        keys,
        samples: records,
    })
}

/// The operator's repair (`reward-ctl layout claims`): reads the shard pins, else
/// walks the whole store under `prefix` (no page budget; `progress` hears the `SCAN`
/// pages read every 100), and, when the store agrees with `shards` or holds nothing,
/// restores the pins. An
/// existing pin is left alone and compared. Answers what the data said.
pub async fn restore_pin(
    client: &Client,
    prefix: &str,
    shards: u32,
    mut progress: impl FnMut(u64),
) -> Result<LayoutProof, ClaimError> {
    if shards == 0 || prefix.is_empty() || prefix.contains(['{', '}']) {
        return Err(ClaimError::Invalid(
            "shards must be positive and the prefix set, without braces",
        ));
    }
    let meta = keys::meta_key(prefix);
    if let Some(stored) = client.hget::<Option<String>, _, _>(&meta, "shards").await? {
        return match stored.parse::<u32>() {
            Ok(n) if n == shards => Ok(LayoutProof::Agrees {
                samples: 0,
                complete: false,
            }),
            Ok(n) => Err(ClaimError::ShardsChanged {
                prefix: prefix.to_string(),
                configured: shards,
                stored: n,
            }),
            Err(_) => Err(ClaimError::Reply(vec![format!(
                "{meta} holds no readable shard count"
            )])),
        };
    }
    let proof = match from_shard_pins(client, prefix, shards).await? {
        Some(proof) => proof,
        None => {
            prove_with(client, prefix, shards, u64::MAX, |pages| {
                if pages % 100 == 0 {
                    progress(pages);
                }
            })
            .await?
        }
    };
    if matches!(proof, LayoutProof::Empty | LayoutProof::Agrees { .. }) {
        let _: i64 = client.hsetnx(&meta, "shards", shards).await?;
        write_shard_pins(client, prefix, shards).await?;
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
        let at = keys::shard_of(trade, shards);
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
