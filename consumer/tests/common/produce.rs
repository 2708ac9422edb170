//! Putting events (signed as the SDK signs them, unsigned, or raw bytes) on the test's
//! virtual queues, waiting until every one is on its broker.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use prost::Message as _;
use proto::v1::RewardEvent;

use super::sdk_section;

/// Puts events and raw payloads on virtual queue `queue` with a producer of its own,
/// and returns once they are all on the broker.
pub async fn publish(tag: &str, dir: &Path, queue: &str, events: &[RewardEvent], raw: &[&[u8]]) {
    let producer = producer(tag, dir).await;
    produce_to(&producer, queue, events, raw).await;
    producer.close(Duration::from_secs(30)).await;
}

/// An SDK on the test's queues, to put events on the events topic.
pub async fn producer(tag: &str, dir: &Path) -> sdk::Sdk {
    let text = sdk_section(tag, dir, &format!("producer-{:04x}", rand::random::<u16>()));
    let doc: toml::Table = text.parse().unwrap();
    let cfg = sdk::config::SdkConfig::from_table(doc["sdk"].as_table().unwrap()).unwrap();
    sdk::Sdk::builder(cfg).start().await.unwrap()
}

/// Puts events (and raw payloads) on the events topic and waits until all are on it.
pub async fn produce(sdk: &sdk::Sdk, events: &[RewardEvent], raw: &[&[u8]]) {
    produce_to(sdk, "massive", events, raw).await;
}

/// As `produce`, to the virtual queue `queue`. Events are signed under the SDK's keys
/// (the test's ring, the service's too) as `send_reward` signs them; `raw` payloads go
/// as they are.
pub async fn produce_to(sdk: &sdk::Sdk, queue: &str, events: &[RewardEvent], raw: &[&[u8]]) {
    let signed: Vec<RewardEvent> = events
        .iter()
        .map(|e| {
            let mut e = e.clone();
            sdk.codec().proofs().sign(&mut e);
            e
        })
        .collect();
    let raw_events: Vec<Vec<u8>> = signed.iter().map(|e| e.encode_to_vec()).collect();
    let mut all: Vec<&[u8]> = raw_events.iter().map(Vec::as_slice).collect();
    all.extend_from_slice(raw);
    put(
        sdk,
        queue,
        &signed,
        &all[..signed.len()],
        &all[signed.len()..],
    )
    .await;
}

/// Puts events exactly as given (no proof added: what a foreign producer writes) on
/// the virtual queue `queue`, and waits until all are on it.
pub async fn produce_unsigned(sdk: &sdk::Sdk, queue: &str, events: &[RewardEvent]) {
    let encoded: Vec<Vec<u8>> = events.iter().map(|e| e.encode_to_vec()).collect();
    let payloads: Vec<&[u8]> = encoded.iter().map(Vec::as_slice).collect();
    put(sdk, queue, events, &payloads, &[]).await;
}

async fn put(
    sdk: &sdk::Sdk,
    queue: &str,
    events: &[RewardEvent],
    payloads: &[&[u8]],
    raw: &[&[u8]],
) {
    for (e, p) in events.iter().zip(payloads) {
        let user = e
            .user
            .as_ref()
            .map(|u| u.user_id.clone())
            .unwrap_or_default();
        sdk.enqueue(
            Some(queue),
            None,
            &user,
            e.trade_no.clone(),
            Bytes::copy_from_slice(p),
        )
        .await
        .unwrap();
    }
    for (i, r) in raw.iter().enumerate() {
        sdk.enqueue(
            Some(queue),
            None,
            "poison",
            format!("poison-{i}"),
            Bytes::copy_from_slice(r),
        )
        .await
        .unwrap();
    }
    reward_testkit::eventually(
        Duration::from_secs(120),
        "the test's events delivered",
        async || {
            let s = sdk.stats();
            if s.unsettled == 0 {
                Ok(())
            } else {
                Err(format!("{s:?}"))
            }
        },
    )
    .await;
    assert_eq!(sdk.stats().spooled, 0, "test events went to the spool");
}
