//! Signed cash events on a topic, through a bare rdkafka producer: the backlog a
//! consumer under measurement drains.

use prost::Message as _;
use proto::v1::{RewardEvent, UserInfo};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use reward_stack::env::StackEnv;

fn event(i: u64, users: u64) -> RewardEvent {
    RewardEvent {
        trade_no: format!("cb:{i}"),
        user: Some(UserInfo {
            user_id: (i % users).to_string(),
            ..Default::default()
        }),
        activity_id: "bench".into(),
        scene_id: "rain".into(),
        reward_type: "cash".into(),
        amount: 1,
        created_at_ms: reward_runtime::clock::now_ms(),
        ..Default::default()
    }
}

/// Puts `n` cash events for `users` users (`cb:<i>`, activity `bench`, scene `rain`,
/// amount 1) on `topic`, each signed under `proofs` as an SDK signs it (the service's:
/// `Sdk::codec`; a consumer has the service refuse an event without a valid proof).
pub async fn produce_events(
    env: &StackEnv,
    topic: &str,
    n: u64,
    users: u64,
    proofs: &sdk::token::proof::EventProofs,
) -> anyhow::Result<()> {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &env.kafka_brokers)
        .set("linger.ms", "5")
        .set("batch.num.messages", "10000");
    let producer: FutureProducer = cfg.create()?;
    let mut pending = Vec::with_capacity(4096);
    for i in 0..n {
        let mut ev = event(i, users);
        proofs.sign(&mut ev);
        let payload = ev.encode_to_vec();
        let record = FutureRecord::to(topic).key(&ev.trade_no).payload(&payload);
        let f = producer
            .send_result(record)
            .map_err(|(e, _)| anyhow::anyhow!("produce: {e}"))?;
        pending.push(f);
        if pending.len() == 4096 {
            for f in pending.drain(..) {
                f.await?.map_err(|(e, _)| anyhow::anyhow!("produce: {e}"))?;
            }
        }
    }
    for f in pending {
        f.await?.map_err(|(e, _)| anyhow::anyhow!("produce: {e}"))?;
    }
    Ok(())
}
