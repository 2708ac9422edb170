//! The token store's background writer: the writer task that sends explicit pipelines
//! of write scripts ([`super::life`]), each write's due entry first; what each answer
//! means is settled by [`super::retry`].

use std::sync::Arc;
use std::sync::atomic::Ordering;

use fred::prelude::*;
use reward_runtime::script::Script;
use tokio::sync::{Semaphore, mpsc};

use super::answer::{Submitted, write_reply};
use super::error::StoreError;
use super::pending::{Reply, Shared, Write};
use super::retry::{give_up, settle};

/// Most writes in one [`WRITE_MANY_LUA`](super::life::WRITE_MANY_LUA) call (Redis runs a script to its end before
/// anything else, so a call stays well under a millisecond).
pub(super) const WRITES_PER_CALL: usize = 128;

/// The writer task: gathers writes into pipelines of up to `pipeline_max`, at most
/// `pool_size` in flight.
pub(super) async fn run(
    pool: Pool,
    script: Script,
    mut rx: mpsc::UnboundedReceiver<Write>,
    shared: Arc<Shared>,
) {
    let cfg = shared.cfg.clone();
    let lanes = Arc::new(Semaphore::new(cfg.pool_size));
    loop {
        let Some(first) = rx.recv().await else {
            break;
        };
        let mut batch = vec![first];
        while batch.len() < cfg.pipeline_max {
            match rx.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        // At most pool_size pipelines in flight; the next batch gathers meanwhile.
        let Ok(permit) = lanes.clone().acquire_owned().await else {
            break;
        };
        let client = pool.next().clone();
        let (script, shared) = (script.clone(), shared.clone());
        tokio::spawn(async move {
            send_pipeline(&client, &script, batch, &shared).await;
            drop(permit);
        });
    }
}

async fn send_pipeline(client: &Client, script: &Script, batch: Vec<Write>, shared: &Arc<Shared>) {
    let stats = &shared.stats;
    let (cap, ttl) = (
        shared.cfg.max_tokens_per_user,
        i64::try_from(shared.cfg.ttl_secs).unwrap_or(i64::MAX),
    );
    stats.pipelines.fetch_add(1, Ordering::Relaxed);
    let retries = batch.iter().filter(|w| w.attempts > 1).count() as u64;
    if retries > 0 {
        stats.retried.fetch_add(retries, Ordering::Relaxed);
        metrics::counter!("reward_sdk_token_write_retries_total").increment(retries);
    }
    let indexed = index_pipeline(client, &batch).await;
    let results = run_pipeline(client, script, &batch, indexed, cap, ttl).await;
    let (mut retrying, mut first_error) = (0_u64, None);
    for (mut w, r) in batch.into_iter().zip(results) {
        let done = std::mem::replace(&mut w.done, Reply::Background);
        let caller = matches!(done, Reply::Wait(_));
        if let Err(e) = &r {
            first_error.get_or_insert_with(|| e.to_string());
        }
        let result = settle(shared, w, r, caller);
        if matches!(result, Ok(Submitted::Retrying)) {
            retrying += 1;
        }
        if let Reply::Wait(tx) = done
            && let Err(Err(e)) = tx.send(result)
            && !matches!(e, StoreError::CapReached { .. })
        {
            // The caller gave up waiting and will never hear this failure: its reward
            // went on (the event guard sent it), so the token is counted as unstored.
            give_up(shared, 1, &e);
        }
    }
    if retrying > 0
        && let Some(e) = first_error
        && shared.may_log()
    {
        // One line per pipeline, not per token: a Redis outage must not flood the log.
        tracing::warn!(retrying, error = %e, "token writes failed; retrying in the background");
    }
}

/// Writes every write's due index entry (`ZADD NX`: a retry keeps the first time), in
/// one pipeline sent before the tokens' scripts, one `ZADD` per due shard (all of a
/// batch's entries for that shard in it); one answer per write, its shard's.
async fn index_pipeline(client: &Client, batch: &[Write]) -> Vec<Result<(), fred::error::Error>> {
    // Shard key -> the writes for it, in batch order.
    let mut shards: std::collections::BTreeMap<&str, Vec<usize>> =
        std::collections::BTreeMap::new();
    for (i, w) in batch.iter().enumerate() {
        shards.entry(w.due.0.as_str()).or_default().push(i);
    }
    let pipe = client.pipeline();
    for (shard, writes) in &shards {
        let entries: Vec<(f64, &str)> = writes
            .iter()
            .map(|&i| (batch[i].due.2, batch[i].due.1.as_str()))
            .collect();
        let queued: Result<(), _> = pipe
            .zadd(*shard, Some(SetOptions::NX), None, false, false, entries)
            .await;
        if let Err(e) = queued {
            return batch.iter().map(|_| Err(e.clone())).collect();
        }
    }
    let replies = pipe.try_all::<i64>().await;
    if replies.len() != shards.len() {
        let e = replies
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| {
                fred::error::Error::new(
                    fred::error::ErrorKind::Protocol,
                    "index pipeline answered a different number of replies",
                )
            });
        return batch.iter().map(|_| Err(e.clone())).collect();
    }
    let mut out: Vec<Result<(), fred::error::Error>> = batch.iter().map(|_| Ok(())).collect();
    for ((_, writes), reply) in shards.iter().zip(replies) {
        if let Err(e) = reply {
            for &i in writes {
                out[i] = Err(e.clone());
            }
        }
    }
    out
}

/// The token scripts of the writes whose index entry landed (the others answer their
/// index error and are retried whole): [`WRITE_MANY_LUA`](super::life::WRITE_MANY_LUA) calls of up to
/// [`WRITES_PER_CALL`] writes, grouped by their hash's slot on a Redis Cluster (a
/// script's keys must share one slot there), all in one pipeline.
async fn run_pipeline(
    client: &Client,
    script: &Script,
    batch: &[Write],
    indexed: Vec<Result<(), fred::error::Error>>,
    cap: u32,
    ttl: i64,
) -> Vec<Result<i64, fred::error::Error>> {
    let chunks = reward_runtime::redis::slot_chunks(
        client.is_clustered(),
        (0..indexed.len()).filter(|&i| indexed[i].is_ok()),
        |i| batch[i].key.as_str(),
        WRITES_PER_CALL,
    );
    let calls = chunks
        .iter()
        .map(|chunk| {
            let mut call = Vec::with_capacity(1 + chunk.len() * 3 + 2);
            call.push(Value::from(chunk.len() as i64));
            for &i in chunk {
                call.push(Value::from(batch[i].key.as_str()));
            }
            call.push(Value::from(i64::from(cap)));
            call.push(Value::from(ttl));
            for &i in chunk {
                call.push(Value::from(batch[i].field.as_str()));
                call.push(Value::from(batch[i].value.as_str()));
            }
            call
        })
        .collect::<Vec<_>>();
    let replies = script.eval_pipeline::<Value>(client, &calls).await;
    let mut out: Vec<Result<i64, fred::error::Error>> = indexed
        .into_iter()
        .map(|ix| {
            ix.and_then(|()| {
                Err(fred::error::Error::new(
                    fred::error::ErrorKind::Protocol,
                    "a token write got no answer",
                ))
            })
        })
        .collect();
    for (chunk, reply) in chunks.iter().zip(replies) {
        match reply {
            Ok(Value::Array(items)) if items.len() == chunk.len() => {
                for (&i, item) in chunk.iter().zip(items) {
                    out[i] = write_reply(item);
                }
            }
            Ok(other) => {
                let e = fred::error::Error::new(
                    fred::error::ErrorKind::Protocol,
                    format!("a write script call answered {other:?}"),
                );
                for &i in chunk {
                    out[i] = Err(e.clone());
                }
            }
            Err(e) => {
                for &i in chunk {
                    out[i] = Err(e.clone());
                }
            }
        }
    }
    out
}
