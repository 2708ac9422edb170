//! The bare producer: the SDK's wire bytes through a raw rdkafka producer with the
//! SDK's librdkafka settings, every delivery report awaited, timed to the last
//! acknowledgement. No validation, no token, no Redis: the ceiling `send_reward` is
//! divided by.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use prost::Message as _;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};
use reward_stack::env::StackEnv;
use reward_stack::topics::create_kafka_topics;
use sdk::request::{RedEnvelopeRain, RewardRequest, User};

use crate::error::RunError;
use crate::figures::{Percentiles, Throughput, micros};
use crate::names::unique_name;

/// The rewards of one run: one red-envelope grab per user, in activity `activity`.
pub fn rewards(activity: &str, n: u64) -> Vec<RewardRequest> {
    let rain = RedEnvelopeRain::new(activity, "cash");
    (0..n)
        .map(|i| {
            rain.grab(
                &User::new((1_000_000 + i).to_string()),
                1,
                1 + (i % 500) as i64,
            )
        })
        .collect()
}

/// Sends the events of `reqs` (the SDK's wire bytes, keyed by trade number) to
/// `topic` through a bare producer with the SDK's settings and `kafka` laid over
/// them; fails unless the broker acknowledged every one.
pub async fn raw_run(
    env: &StackEnv,
    kafka: &BTreeMap<String, String>,
    topic: &str,
    reqs: &[RewardRequest],
) -> Result<Throughput, RunError> {
    let timeout = Duration::from_secs(30);
    let producer: FutureProducer =
        sdk::queue::producer::kafka_client_config(&env.kafka_brokers, kafka, timeout)
            .create()
            .map_err(|e| RunError::Setup(format!("raw producer: {e}")))?;
    // The same bytes the SDK puts on the wire.
    let now = 1_790_000_000_000;
    let payloads: Vec<(String, Vec<u8>)> = reqs
        .iter()
        .map(|r| {
            (
                r.trade_no.clone(),
                r.event(now, now + 3_600_000).encode_to_vec(),
            )
        })
        .collect();
    let mut calls = Vec::with_capacity(payloads.len());
    let mut pending = Vec::with_capacity(payloads.len());
    let start = Instant::now();
    for (key, payload) in &payloads {
        let t = Instant::now();
        loop {
            let record = FutureRecord::to(topic).key(key.as_bytes()).payload(payload);
            match producer.send_result(record) {
                Ok(f) => {
                    pending.push(f);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err((e, _)) => {
                    return Err(RunError::Incomplete {
                        run: "raw",
                        what: format!("enqueue: {e}"),
                    });
                }
            }
        }
        calls.push(micros(t.elapsed()));
    }
    let mut acked = 0u64;
    let mut first_error = None;
    for f in pending {
        match f.await {
            Ok(Ok(_)) => acked += 1,
            Ok(Err((e, _))) => {
                first_error.get_or_insert_with(|| e.to_string());
            }
            Err(_) => {
                first_error.get_or_insert_with(|| "delivery report dropped".to_string());
            }
        }
    }
    let elapsed = start.elapsed();
    if acked != payloads.len() as u64 {
        return Err(RunError::Incomplete {
            run: "raw",
            what: format!(
                "{acked} of {} acknowledged; first error: {}",
                payloads.len(),
                first_error.unwrap_or_default()
            ),
        });
    }
    Ok(Throughput {
        events: acked,
        elapsed,
        calls: Percentiles::of(&mut calls),
    })
}

/// The bare producer's ceiling on this broker: `n` reward events (the SDK's wire
/// bytes) through a raw rdkafka producer with the SDK's settings, on a fresh topic of
/// `partitions` partitions, events/s. The replay's `--ceilings` puts it beside the
/// end-to-end rate.
pub async fn raw_ceiling(env: &StackEnv, n: u64, partitions: i32) -> Result<f64, RunError> {
    let tag = unique_name("ceiling");
    let topic = format!("{tag}-raw");
    create_kafka_topics(&env.kafka_brokers, &[topic.as_str()], partitions)
        .await
        .map_err(RunError::Setup)?;
    Ok(raw_run(env, &BTreeMap::new(), &topic, &rewards(&tag, n))
        .await?
        .rate())
}
