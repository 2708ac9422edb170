//! Unit tests of the queue: ratio bucketing of user ids, and the engine (batching,
//! failover, retry, spool and replay, close) over two in-memory producers
//! ([`FakeProducer`]) and a spool in a temporary directory: no broker, no Redis.
//!
//! Timing is tokio's paused clock (`start_paused`): backoffs, lingers and replay
//! periods pass at once. The spool is written by an OS thread, outside that clock;
//! [`run_until`] moves the clock a millisecond at a time and gives that thread real
//! time between steps.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use tokio::sync::oneshot;

use super::producer::fake::FakeProducer;
use super::*;
use crate::config::{BatchConfig, QueueConfig, RetryConfig, Routing, SpoolConfig, TypeConfig};

#[test]
fn numeric_ids_bucket_by_modulo_others_stably() {
    assert_eq!(bucket("1234"), 34);
    assert_eq!(bucket("99"), 99);
    assert_eq!(bucket("u42"), bucket("u42"));
    assert!(bucket("u42") < 100);
}

const TOPIC: &str = "reward-q";
/// Longer than any test waits: a close that returns did not hit its deadline.
const CLOSE: Duration = Duration::from_secs(600);

/// A spool directory removed when the test ends.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let d = std::env::temp_dir().join(format!(
            "reward-queue-{name}-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        let _ = std::fs::remove_dir_all(&d);
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One queue `q` on topic [`TOPIC`]: primary `a`, backup `b`.
struct Rig {
    engine: Arc<Engine>,
    a: Arc<FakeProducer>,
    b: Arc<FakeProducer>,
    dir: TempDir,
}

/// Settings of a rig: small batches, short backoffs, a spool window no test reaches
/// unless it says so.
struct Knobs {
    ratio: u8,
    pack: usize,
    batch: BatchConfig,
    retry: RetryConfig,
    spool_after_ms: u64,
    replay_every_ms: u64,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            ratio: 100,
            pack: 10,
            batch: BatchConfig {
                max_events: 100,
                linger_ms: 5,
                in_flight_batches: 4,
                buffer: 10_000,
                enqueue_wait_ms: 20,
                send_timeout_ms: 5_000,
            },
            retry: RetryConfig {
                backoff_initial_ms: 10,
                backoff_max_ms: 40,
            },
            spool_after_ms: 3_600_000,
            replay_every_ms: 50,
        }
    }
}

fn rig(name: &str, k: Knobs) -> Rig {
    let a = Arc::new(FakeProducer::new("a"));
    let b = Arc::new(FakeProducer::new("b"));
    let queue = QueueConfig {
        topic: TOPIC.into(),
        primary: "a".into(),
        backup: "b".into(),
        ratio: k.ratio,
        pack_events: k.pack,
    };
    let routing = Routing {
        queues: BTreeMap::from([("q".to_string(), queue)]),
        types: BTreeMap::from([("cash".to_string(), TypeConfig::default())]),
        default_queue: "q".into(),
        max_amount: 1_000,
    };
    let dir = TempDir::new(name);
    let spool = SpoolConfig {
        dir: dir.0.clone(),
        after_ms: k.spool_after_ms,
        max_bytes: 1 << 20,
        sync_ms: 1,
        replay_every_ms: k.replay_every_ms,
    };
    let producers: BTreeMap<String, Arc<dyn Producer>> = BTreeMap::from([
        ("a".to_string(), a.clone() as Arc<dyn Producer>),
        ("b".to_string(), b.clone() as Arc<dyn Producer>),
    ]);
    let engine = Engine::start(
        Arc::new(ArcSwap::from_pointee(routing)),
        producers,
        k.batch,
        k.retry,
        spool,
    )
    .unwrap();
    Rig { engine, a, b, dir }
}

fn key(i: usize) -> String {
    format!("t{i}")
}

fn payload(i: usize) -> Bytes {
    Bytes::from(format!("event-{i}"))
}

/// Accepts events `0..n`, event `i` from user `i` (bucket `i % 100`); answers each
/// event's settlement.
async fn send(engine: &Engine, n: usize) -> Vec<oneshot::Receiver<Settled>> {
    send_range(engine, 0..n).await
}

/// As [`send`], for the events of `range`.
async fn send_range(
    engine: &Engine,
    range: std::ops::Range<usize>,
) -> Vec<oneshot::Receiver<Settled>> {
    let mut out = Vec::with_capacity(range.len());
    for i in range {
        let slot = engine.reserve("q").await.unwrap();
        let (env, rx) =
            Envelope::new(Arc::from("q"), key(i), bucket(&i.to_string()), payload(i)).with_notice();
        engine.commit(slot, env);
        out.push(rx);
    }
    out
}

async fn settled(rxs: Vec<oneshot::Receiver<Settled>>) -> Vec<Settled> {
    let mut out = Vec::with_capacity(rxs.len());
    for rx in rxs {
        out.push(rx.await.unwrap());
    }
    out
}

/// Asserts that `got` holds exactly the events `want`, each once with its payload:
/// no loss, no duplicate, nothing else.
fn exactly(got: &[(String, Bytes)], want: impl IntoIterator<Item = usize>) {
    let mut got: Vec<(String, Bytes)> = got.to_vec();
    got.sort();
    let mut want: Vec<(String, Bytes)> = want.into_iter().map(|i| (key(i), payload(i))).collect();
    want.sort();
    assert_eq!(got.len(), want.len(), "event count");
    assert_eq!(got, want);
}

/// Moves the paused clock a millisecond at a time until `cond` holds, giving the
/// spool's OS thread a little real time at each step; fails past `virtual_max`.
async fn run_until(what: &str, virtual_max: Duration, cond: impl Fn() -> bool) {
    let start = tokio::time::Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < virtual_max,
            "not within {virtual_max:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
        std::thread::sleep(Duration::from_micros(50));
    }
}

#[tokio::test(start_paused = true)]
async fn every_event_reaches_its_primary_once() {
    let r = rig("primary", Knobs::default());
    let rxs = send(&r.engine, 250).await;
    assert!(settled(rxs).await.iter().all(|s| *s == Settled::Delivered));
    let report = r.engine.close(CLOSE).await;
    exactly(&r.a.events(TOPIC), 0..250);
    assert_eq!(r.b.event_count(), 0);
    let s = &report.stats;
    assert_eq!((s.accepted, s.delivered), (250, 250));
    assert_eq!(s.records, 25, "packed 10 events to a record");
    assert_eq!((s.failovers, s.retries, s.spooled, s.logged), (0, 0, 0, 0));
    assert_eq!(s.per_producer, BTreeMap::from([("a".to_string(), 250)]));
    assert_eq!((report.left, report.spool_bytes), (0, 0));
    assert!(r.a.closed() && r.b.closed(), "close closes the producers");
}

#[tokio::test(start_paused = true)]
async fn ratio_sends_low_buckets_to_the_primary_the_rest_to_the_backup() {
    let r = rig(
        "ratio",
        Knobs {
            ratio: 30,
            ..Knobs::default()
        },
    );
    settled(send(&r.engine, 200).await).await;
    let report = r.engine.close(CLOSE).await;
    // User i is in bucket i % 100.
    exactly(&r.a.events(TOPIC), (0..200).filter(|i| i % 100 < 30));
    exactly(&r.b.events(TOPIC), (0..200).filter(|i| i % 100 >= 30));
    assert_eq!(report.stats.delivered, 200);
    assert_eq!(report.stats.failovers, 0);
}

#[tokio::test(start_paused = true)]
async fn a_failing_primary_fails_over_to_the_backup() {
    let r = rig("failover", Knobs::default());
    r.a.fail_always(true);
    let rxs = send(&r.engine, 100).await;
    assert!(settled(rxs).await.iter().all(|s| *s == Settled::Delivered));
    let report = r.engine.close(CLOSE).await;
    assert_eq!(r.a.event_count(), 0);
    exactly(&r.b.events(TOPIC), 0..100);
    let s = &report.stats;
    assert_eq!(
        (s.delivered, s.failovers, s.retries, s.spooled),
        (100, 100, 0, 0)
    );
    assert_eq!(report.left, 0);
}

#[tokio::test(start_paused = true)]
async fn unanswered_records_fail_over_and_answered_ones_do_not() {
    let r = rig(
        "short",
        Knobs {
            pack: 1,
            batch: BatchConfig {
                max_events: 10,
                ..Knobs::default().batch
            },
            ..Knobs::default()
        },
    );
    // One batch of 10 single-event records; `a` answers (and keeps) the first 3.
    r.a.answer_at_most(Some(3));
    settled(send(&r.engine, 10).await).await;
    let report = r.engine.close(CLOSE).await;
    exactly(&r.a.events(TOPIC), 0..3);
    exactly(&r.b.events(TOPIC), 3..10);
    assert_eq!(report.stats.failovers, 7);
    assert_eq!(report.stats.delivered, 10);
    assert_eq!(report.stats.retries, 0);
}

#[tokio::test(start_paused = true)]
async fn both_failing_retry_with_doubling_backoff_alternating_producers() {
    let r = rig("retry", Knobs::default());
    // Every event is in one batch (committed before the dispatcher runs). Each
    // producer fails its next three sends: a, b (failover), then the retries
    // alternate b, a, b, a, and the fourth send to b succeeds.
    r.a.fail_next(3);
    r.b.fail_next(3);
    let t0 = tokio::time::Instant::now();
    let rxs = send(&r.engine, 50).await;
    assert!(settled(rxs).await.iter().all(|s| *s == Settled::Delivered));
    let took = t0.elapsed();
    let report = r.engine.close(CLOSE).await;
    assert_eq!(r.a.event_count(), 0);
    exactly(&r.b.events(TOPIC), 0..50);
    assert_eq!((r.a.sends(), r.a.failed_sends()), (3, 3));
    assert_eq!((r.b.sends(), r.b.failed_sends()), (4, 3));
    let s = &report.stats;
    assert_eq!(s.retries, 5 * 50, "five rounds of retries");
    assert_eq!((s.delivered, s.failovers, s.spooled), (50, 50, 0));
    // Backoffs 10, 20, 40, 40 (the ceiling), 40 ms after a 5 ms linger.
    assert!(
        took >= Duration::from_millis(155) && took < Duration::from_millis(200),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn both_down_past_the_window_spool_then_replay_each_event_once() {
    const PERIOD_MS: u64 = 30_000;
    let r = rig(
        "spool",
        Knobs {
            spool_after_ms: 100,
            // Long against the spool thread's real time, which a paused clock races
            // past: within a period of a batch finding them down, both stay known down.
            replay_every_ms: PERIOD_MS,
            ..Knobs::default()
        },
    );
    r.a.fail_always(true);
    r.b.fail_always(true);
    let rxs = send(&r.engine, 40).await;
    // Not a tokio timeout around the notices: while the runtime waits for the spool
    // thread, a paused clock would run straight to that timeout.
    let e = r.engine.clone();
    run_until("spooled", Duration::from_secs(10), || {
        let s = e.stats();
        s.spooled == 40 && s.unsettled == 0 && e.spool_bytes() > 0
    })
    .await;
    assert!(settled(rxs).await.iter().all(|s| *s == Settled::Spooled));
    let s = r.engine.stats();
    assert_eq!((s.spooled, s.delivered, s.logged), (40, 0, 0));
    // Failing since the first send at 5 ms: retried at 15, 35, 75 and 115 ms, where
    // both had failed for 100 ms or more.
    assert_eq!(s.retries, 4 * 40);
    assert_eq!(r.a.event_count() + r.b.event_count(), 0);

    // Both known down: later events go straight to the spool, without a send, a
    // failover or a retry of their own.
    let failovers = s.failovers;
    let more = send_range(&r.engine, 40..50).await;
    let e = r.engine.clone();
    run_until("spooled at once", Duration::from_secs(10), || {
        let s = e.stats();
        s.spooled == 50 && s.unsettled == 0
    })
    .await;
    assert!(settled(more).await.iter().all(|s| *s == Settled::Spooled));
    let s = r.engine.stats();
    assert_eq!((s.retries, s.failovers), (4 * 40, failovers));

    // A replay period later one batch tries the producers again (the probe: it
    // fails over, then goes to the spool); the next keeps to the spool.
    tokio::time::sleep(Duration::from_millis(PERIOD_MS)).await;
    let probe = send_range(&r.engine, 50..60).await;
    let e = r.engine.clone();
    run_until("the probe spooled", Duration::from_secs(10), || {
        let s = e.stats();
        s.spooled == 60 && s.unsettled == 0
    })
    .await;
    assert!(settled(probe).await.iter().all(|s| *s == Settled::Spooled));
    assert_eq!(r.engine.stats().failovers, failovers + 10, "the probe");
    let next = send_range(&r.engine, 60..70).await;
    let e = r.engine.clone();
    run_until("spooled at once again", Duration::from_secs(10), || {
        let s = e.stats();
        s.spooled == 70 && s.unsettled == 0
    })
    .await;
    assert!(settled(next).await.iter().all(|s| *s == Settled::Spooled));
    let s = r.engine.stats();
    assert_eq!((s.retries, s.failovers), (4 * 40, failovers + 10));

    r.a.recover();
    r.b.recover();
    let e = r.engine.clone();
    run_until("replay", Duration::from_secs(90), || {
        e.stats().replayed == 70 && e.spool_bytes() == 0
    })
    .await;
    // A producer answering again takes new events at once.
    let last = send_range(&r.engine, 70..80).await;
    assert!(settled(last).await.iter().all(|s| *s == Settled::Delivered));
    let report = r.engine.close(CLOSE).await;
    // The replay goes to the queue's primary first; the backup got nothing.
    exactly(&r.a.events(TOPIC), 0..80);
    assert_eq!(r.b.event_count(), 0);
    let s = &report.stats;
    assert_eq!(
        (s.delivered, s.replayed, s.spooled, s.logged),
        (80, 70, 70, 0)
    );
    assert_eq!((report.left, report.spool_bytes), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn close_delivers_the_buffer_without_waiting_for_the_linger() {
    let r = rig(
        "close",
        Knobs {
            batch: BatchConfig {
                linger_ms: 60_000,
                max_events: 1_000,
                ..Knobs::default().batch
            },
            ..Knobs::default()
        },
    );
    let _rxs = send(&r.engine, 50).await;
    let e = r.engine.clone();
    let closing = tokio::spawn(async move { e.close(CLOSE).await });
    // Delivered within a second of the close, not after the minute's linger. (How
    // long close itself takes on a paused clock says nothing: its wait for the spool
    // thread's final sync lets the clock run to the deadline.)
    let a = r.a.clone();
    run_until("delivered on close", Duration::from_secs(1), || {
        a.event_count() == 50
    })
    .await;
    let report = closing.await.unwrap();
    exactly(&r.a.events(TOPIC), 0..50);
    assert_eq!((report.stats.delivered, report.left), (50, 0));
    assert!(matches!(
        r.engine.reserve("q").await,
        Err(EnqueueError::Closed)
    ));
}

#[tokio::test(start_paused = true)]
async fn close_waits_for_slow_sends_until_its_deadline() {
    let r = rig("slow", Knobs::default());
    r.a.delay(Duration::from_secs(3));
    let _rxs = send(&r.engine, 20).await;
    let t0 = tokio::time::Instant::now();
    let report = r.engine.close(Duration::from_secs(1)).await;
    assert_eq!(t0.elapsed(), Duration::from_secs(1));
    assert_eq!(
        report.left, 20,
        "the deadline passed before the broker answered"
    );
    assert_eq!(r.a.event_count(), 0);

    let r = rig("slow2", Knobs::default());
    r.a.delay(Duration::from_secs(3));
    let _rxs = send(&r.engine, 20).await;
    let report = r.engine.close(Duration::from_secs(10)).await;
    assert_eq!((report.left, report.stats.delivered), (0, 20));
    exactly(&r.a.events(TOPIC), 0..20);
}

#[tokio::test(start_paused = true)]
async fn close_spools_what_no_broker_takes() {
    let r = rig("close-spool", Knobs::default());
    r.a.fail_always(true);
    r.b.fail_always(true);
    let rxs = send(&r.engine, 30).await;
    // Let the first round fail, so some events sit in the retry loop at close.
    tokio::time::sleep(Duration::from_millis(8)).await;
    assert_eq!(r.engine.stats().retries, 30);
    let e = r.engine.clone();
    let closing = tokio::spawn(async move { e.close(CLOSE).await });
    let e = r.engine.clone();
    run_until("close", Duration::from_secs(60), || {
        e.stats().unsettled == 0
    })
    .await;
    let report = closing.await.unwrap();
    assert!(settled(rxs).await.iter().all(|s| *s == Settled::Spooled));
    let s = &report.stats;
    assert_eq!((s.spooled, s.delivered, s.logged), (30, 0, 0));
    assert_eq!(report.left, 0);
    // What the spool holds on disk: each event once, under its own key.
    let mut spool = crate::spool::Spool::open(&r.dir.0, 1 << 20).unwrap();
    let mut held = Vec::new();
    loop {
        let replay = spool.take().unwrap();
        if replay.is_empty() {
            break;
        }
        for rec in &replay.records {
            assert_eq!(rec.queue, "q");
            held.push((rec.key.clone().unwrap(), Bytes::from(rec.payload.clone())));
        }
    }
    exactly(&held, 0..30);
}
