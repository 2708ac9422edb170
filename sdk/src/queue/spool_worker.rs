//! The spool side of the queue: the thread that owns the spool file (appends and
//! syncs in batches, serves replays), and the loop that replays spooled events to a
//! broker once one answers again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message as _;
use tokio::sync::{mpsc, oneshot};

use super::envelope::{Envelope, Settled};
use super::producer::OutMsg;
use super::shared::{Shared, SpoolCmd};
use crate::spool::Spool;

/// Owns the spool file: appends and syncs in batches, serves replays.
pub(super) fn spool_thread(
    mut spool: Spool,
    mut rx: mpsc::UnboundedReceiver<SpoolCmd>,
    engine: std::sync::Weak<Shared>,
    bytes: Arc<AtomicU64>,
    sync_every: Duration,
) {
    let mut pending: Vec<Envelope> = Vec::new();
    // What the spool holds at start (a previous run's events), before any command.
    metrics::gauge!("reward_sdk_spool_bytes").set(spool.bytes() as f64);
    while let Some(cmd) = rx.blocking_recv() {
        let cmds = gather(&mut rx, cmd, sync_every);
        for cmd in cmds {
            apply(cmd, &mut spool, &mut pending, &engine);
        }
        settle_pending(&engine, &mut pending, &mut spool);
        bytes.store(spool.bytes(), Ordering::Relaxed);
        metrics::gauge!("reward_sdk_spool_bytes").set(spool.bytes() as f64);
    }
    let _ = spool.sync();
}

/// The command just received, followed by those that arrived meanwhile.
fn gather(
    rx: &mut mpsc::UnboundedReceiver<SpoolCmd>,
    first: SpoolCmd,
    sync_every: Duration,
) -> Vec<SpoolCmd> {
    let mut cmds = vec![first];
    // Gather what arrived meanwhile, up to one sync period.
    let until = Instant::now() + sync_every;
    while Instant::now() < until {
        match rx.try_recv() {
            Ok(c) => cmds.push(c),
            Err(_) => {
                if cmds.iter().any(|c| !matches!(c, SpoolCmd::Append(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1).min(sync_every));
                if rx.is_empty() {
                    break;
                }
            }
        }
    }
    cmds
}

/// Carries out one command on the spool file; appended envelopes wait in `pending`
/// for the next sync.
fn apply(
    cmd: SpoolCmd,
    spool: &mut Spool,
    pending: &mut Vec<Envelope>,
    engine: &std::sync::Weak<Shared>,
) {
    match cmd {
        SpoolCmd::Append(e) => match spool.append_keyed(&e.queue, &e.key, &e.payload) {
            Ok(()) => pending.push(e),
            Err(err) => {
                if let Some(engine) = engine.upgrade() {
                    engine.last_resort(&e, &err.to_string());
                    engine.settle(1);
                }
            }
        },
        SpoolCmd::Take(reply) => {
            settle_pending(engine, pending, spool);
            let _ = reply.send(spool.take());
        }
        SpoolCmd::Ack(replay, reply) => {
            let _ = reply.send(spool.ack(&replay));
        }
        SpoolCmd::Release(replay) => spool.release(&replay),
        SpoolCmd::Sync(reply) => {
            settle_pending(engine, pending, spool);
            let _ = reply.send(());
        }
    }
}

/// Syncs the spool and settles the envelopes appended since the last sync: spooled
/// when the sync succeeded, logged when it failed.
fn settle_pending(
    engine: &std::sync::Weak<Shared>,
    pending: &mut Vec<Envelope>,
    spool: &mut Spool,
) {
    if pending.is_empty() {
        return;
    }
    let Some(engine) = engine.upgrade() else {
        return;
    };
    let synced = spool.sync();
    let n = pending.len() as u64;
    if let Err(e) = synced {
        for p in pending.iter() {
            engine.last_resort(p, &e.to_string());
        }
    } else {
        for p in pending.iter() {
            p.notify(Settled::Spooled);
        }
        engine.stats.spooled.add(n);
    }
    pending.clear();
    engine.settle(n);
}

/// Replays the spool whenever it holds data and the engine is not closing.
pub(super) async fn replay_loop(engine: std::sync::Weak<Shared>) {
    loop {
        let every = match engine.upgrade() {
            Some(e) => Duration::from_millis(e.spool_cfg.replay_every_ms.max(10)),
            None => return,
        };
        tokio::time::sleep(every).await;
        let Some(engine) = engine.upgrade() else {
            return;
        };
        if engine.closing.load(Ordering::Acquire) {
            return;
        }
        if engine.spool_bytes() == 0 {
            continue;
        }
        if let Err(e) = replay_once(&engine).await {
            tracing::warn!(error = %e, "spool replay failed; will try again");
        }
    }
}

/// Replays the spool one segment at a time, oldest first, until it is empty or a
/// segment fails. A delivered segment is deleted before the next is read, so a
/// failure repeats only the segment it happened in (at least once), and memory holds
/// one segment at most.
async fn replay_once(engine: &Arc<Shared>) -> Result<(), String> {
    loop {
        if engine.closing.load(Ordering::Acquire) {
            return Ok(());
        }
        let (tx, rx) = oneshot::channel();
        engine
            .spool_tx
            .send(SpoolCmd::Take(tx))
            .map_err(|_| "spool thread gone".to_string())?;
        let replay = rx
            .await
            .map_err(|_| "spool thread gone".to_string())?
            .map_err(|e| e.to_string())?;
        if replay.is_empty() {
            return Ok(());
        }
        if replay.torn > 0 {
            tracing::warn!(
                bytes = replay.torn,
                "spool held a torn tail (crash mid-write); skipped"
            );
            metrics::counter!("reward_sdk_spool_torn_bytes_total").increment(replay.torn);
        }
        match replay_segment(engine, &replay).await {
            Ok(delivered) => {
                let (tx, rx) = oneshot::channel();
                engine
                    .spool_tx
                    .send(SpoolCmd::Ack(replay, tx))
                    .map_err(|_| "spool thread gone".to_string())?;
                rx.await
                    .map_err(|_| "spool thread gone".to_string())?
                    .map_err(|e| e.to_string())?;
                engine.stats.replayed.add(delivered);
                engine
                    .stats
                    .delivered
                    .fetch_add(delivered, Ordering::Relaxed);
            }
            Err(delivered) => {
                // Some records may have gone out before the failure: they go again
                // with the segment (at least once).
                let _ = engine.spool_tx.send(SpoolCmd::Release(replay));
                return Err(format!(
                    "no producer took a spooled batch ({delivered} of the segment went \
                     out, the segment will repeat)"
                ));
            }
        }
    }
}

/// Sends one segment's records in batches, each to its queue's primary then backup;
/// `Ok(records)` when every batch was acknowledged, `Err(sent so far)` otherwise.
async fn replay_segment(engine: &Arc<Shared>, replay: &crate::spool::Replay) -> Result<u64, u64> {
    let mut delivered = 0u64;
    for chunk in replay.records.chunks(engine.batch.max_events.max(1)) {
        let mut by_queue: BTreeMap<&str, Vec<OutMsg>> = BTreeMap::new();
        for r in chunk {
            // The key it was sent with; a record of the older layout has none, and
            // then its event's trade number is the key.
            let key = r.key.clone().unwrap_or_else(|| {
                proto::v1::RewardEvent::decode(r.payload.as_slice())
                    .map(|e| e.trade_no)
                    .unwrap_or_default()
            });
            by_queue.entry(r.queue.as_str()).or_default().push(OutMsg {
                key,
                payload: Bytes::from(r.payload.clone()),
            });
        }
        for (queue, msgs) in by_queue {
            // A queue removed from the config since falls back to the default queue
            // (queue_config); None only if that is gone too.
            let Some(q) = engine.queue_config(queue) else {
                return Err(delivered);
            };
            let mut sent = false;
            for p in [&q.primary, &q.backup] {
                let Some(producer) = engine.producers.get(p) else {
                    continue;
                };
                let records =
                    crate::queue::producer::pack(&msgs, q.pack_events, |m| &m.key, |m| &m.payload);
                let n = records.len();
                let records: Vec<OutMsg> = records.into_iter().map(|r| r.0).collect();
                let results = producer.send_batch(&q.topic, &records).await;
                let ok = results.len() == n && results.iter().all(Result::is_ok);
                if ok {
                    engine.stats.records.fetch_add(n as u64, Ordering::Relaxed);
                }
                engine.mark(p, ok);
                if ok {
                    sent = true;
                    break;
                }
            }
            if !sent {
                return Err(delivered);
            }
            delivered += msgs.len() as u64;
        }
    }
    Ok(delivered)
}
