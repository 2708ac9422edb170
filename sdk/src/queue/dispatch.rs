//! The per-queue dispatchers: each batches its queue's events on size or linger, sends
//! them to the primary or the backup broker by the user's bucket, fails over to the
//! other, and hands what still failed to the retry loop (backoff) or to the spool.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, mpsc};

use super::envelope::{Envelope, Settled};
use super::producer::OutMsg;
use super::shared::Shared;
use crate::config::QueueConfig;

/// One queue's dispatcher: batches on size or linger, routes, sends.
pub(super) async fn dispatch(engine: Arc<Shared>, queue: String, mut rx: mpsc::Receiver<Envelope>) {
    // Validated to 1..=MAX_IN_FLIGHT_BATCHES, so the u32 conversion holds.
    let window = engine.batch.in_flight_batches;
    let lanes = Arc::new(Semaphore::new(window));
    let linger = Duration::from_millis(engine.batch.linger_ms);
    let max = engine.batch.max_events;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let until = tokio::time::Instant::now() + linger;
        while batch.len() < max {
            match rx.try_recv() {
                Ok(e) => batch.push(e),
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    match tokio::time::timeout_at(until, rx.recv()).await {
                        Ok(Some(e)) => batch.push(e),
                        _ => break,
                    }
                }
            }
        }
        let Ok(permit) = lanes.clone().acquire_owned().await else {
            break;
        };
        let engine = engine.clone();
        let queue = queue.clone();
        tokio::spawn(async move {
            send_routed(&engine, &queue, batch).await;
            drop(permit);
        });
    }
    // Wait for the batches still on their way.
    let _ = lanes
        .acquire_many(u32::try_from(window).unwrap_or(u32::MAX))
        .await;
}

async fn send_routed(engine: &Arc<Shared>, queue: &str, batch: Vec<Envelope>) {
    let Some(q) = engine.queue_config(queue) else {
        // No queue at all in the routing (cannot pass validation); keep the events.
        engine.spool(batch);
        return;
    };
    // Both producers known down for this topic: the batch goes straight to the
    // spool rather than waiting out two failed sends, so a call answered from the
    // spool answers once the spool syncs (`Shared::spool_at_once`).
    if engine.spool_at_once(&q) {
        engine.spool(batch);
        return;
    }
    let (to_primary, to_backup): (Vec<_>, Vec<_>) =
        batch.into_iter().partition(|e| e.bucket < q.ratio);
    let (a, b) = tokio::join!(
        failover(engine, &q, &q.primary, &q.backup, to_primary),
        failover(engine, &q, &q.backup, &q.primary, to_backup),
    );
    engine.to_retry(a.into_iter().chain(b).collect(), &q);
}

async fn failover(
    engine: &Arc<Shared>,
    q: &QueueConfig,
    first: &str,
    second: &str,
    envs: Vec<Envelope>,
) -> Vec<Envelope> {
    if envs.is_empty() {
        return envs;
    }
    let failed = engine.attempt(first, q, envs).await;
    if failed.is_empty() {
        return failed;
    }
    engine
        .stats
        .failovers
        .fetch_add(failed.len() as u64, Ordering::Relaxed);
    if let Some(h) = engine.health.get(first) {
        h.failovers_from.add(failed.len() as u64);
    }
    engine.attempt(second, q, failed).await
}

impl Shared {
    /// Sends `envs` through one producer, packed `q.pack_events` to a broker record
    /// ([`super::producer::pack`]); returns those that failed (every event of a
    /// failed record).
    async fn attempt(&self, producer: &str, q: &QueueConfig, envs: Vec<Envelope>) -> Vec<Envelope> {
        let Some(p) = self.producers.get(producer) else {
            return envs;
        };
        let topic = q.topic.as_str();
        let records = super::producer::pack(&envs, q.pack_events, |e| &e.key, |e| &e.payload);
        let counts: Vec<usize> = records.iter().map(|r| r.1).collect();
        let msgs: Vec<OutMsg> = records.into_iter().map(|r| r.0).collect();
        let start = Instant::now();
        let answers = p.send_batch(topic, &msgs).await;
        let records_ok = answers.iter().filter(|a| a.is_ok()).count() as u64;
        self.stats.records.fetch_add(records_ok, Ordering::Relaxed);
        let results = super::producer::spread(answers, counts);
        let health = self.health.get(producer);
        if let Some(h) = health {
            h.send_seconds.record(start.elapsed().as_secs_f64());
        }
        let mut failed = Vec::new();
        let mut ok = 0u64;
        let mut last_err = None;
        for (env, r) in envs
            .into_iter()
            .zip(results.into_iter().chain(std::iter::repeat(None)))
        {
            match r {
                Some(Ok(())) => {
                    ok += 1;
                    env.notify(Settled::Delivered);
                }
                Some(Err(e)) => {
                    last_err = Some(e);
                    failed.push(env);
                }
                None => failed.push(env),
            }
        }
        self.mark(producer, failed.is_empty());
        if !failed.is_empty()
            && let Some(e) = last_err
        {
            tracing::debug!(producer, topic, failed = failed.len(), error = %e, "send failed");
        }
        if ok > 0 {
            self.stats.delivered.fetch_add(ok, Ordering::Relaxed);
            if let Some(h) = health {
                h.sent.add(ok);
            }
            self.settle(ok);
        }
        failed
    }

    /// Failed twice (or more): retry later, or spool.
    fn to_retry(self: &Arc<Self>, envs: Vec<Envelope>, q: &QueueConfig) {
        if envs.is_empty() {
            return;
        }
        let backlog = self.retry_backlog.load(Ordering::Relaxed);
        let both_down = self.both_down(q);
        if both_down {
            self.found_down(q);
        }
        if self.closing.load(Ordering::Acquire)
            || both_down
            || backlog + envs.len() as u64 > self.batch.buffer as u64
        {
            self.spool(envs);
            return;
        }
        let n = envs.len() as u64;
        self.retry_backlog.fetch_add(n, Ordering::Relaxed);
        self.stats.retries.add(n);
        let engine = self.clone();
        let q = q.clone();
        tokio::spawn(async move {
            let attempt = envs.iter().map(|e| e.attempt).max().unwrap_or(0) + 1;
            let shift = attempt.saturating_sub(1).min(20);
            let backoff = engine
                .retry
                .backoff_initial_ms
                .saturating_mul(1 << shift)
                .min(engine.retry.backoff_max_ms);
            tokio::time::sleep(Duration::from_millis(backoff)).await;
            engine.retry_backlog.fetch_sub(n, Ordering::Relaxed);
            let mut envs = envs;
            for e in &mut envs {
                e.attempt = attempt;
            }
            // Alternate: odd attempts start on the backup side of the user's first choice.
            let (first, second): (Vec<_>, Vec<_>) = envs
                .into_iter()
                .partition(|e| (e.bucket < q.ratio) == (attempt % 2 == 0));
            let mut failed = Vec::new();
            if !first.is_empty() {
                failed.extend(engine.attempt(&q.primary, &q, first).await);
            }
            if !second.is_empty() {
                failed.extend(engine.attempt(&q.backup, &q, second).await);
            }
            engine.to_retry(failed, &q);
        });
    }
}
