//! The raw side of `reward-bench send`: the SDK's wire bytes through a bare rdkafka
//! producer, every delivery report awaited, timed to the last acknowledgement.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use prost::Message as _;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};
use reward_tools::stack::StackEnv;
use sdk::request::RewardRequest;

use super::{BenchError, Percentiles, Throughput, micros};

pub(super) async fn raw_run(
    env: &StackEnv,
    kafka: &BTreeMap<String, String>,
    topic: &str,
    reqs: &[RewardRequest],
) -> Result<Throughput, BenchError> {
    let timeout = Duration::from_secs(30);
    let producer: FutureProducer =
        sdk::queue::producer::kafka_client_config(&env.kafka_brokers, kafka, timeout)
            .create()
            .map_err(|e| BenchError::Setup(format!("raw producer: {e}")))?;
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
                    return Err(BenchError::Incomplete {
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
        return Err(BenchError::Incomplete {
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
