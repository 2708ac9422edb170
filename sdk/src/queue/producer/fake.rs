//! A broker that lives in memory, for tests that must run with no broker up.
//!
//! [`FakeProducer`] stands where a [`super::KafkaProducer`] or
//! [`super::RocketMqProducer`] would: the queue engine (and anything built on it, the
//! consumer's dead letters included) sends to it through the same [`Producer`] trait.
//! It keeps every record it acknowledged, per topic, in the order it took them, and
//! can be told to misbehave:
//!
//! - [`FakeProducer::fail_next`]: the next `n` sends fail as a whole (every record
//!   answered with an error, none kept);
//! - [`FakeProducer::fail_always`]: every send fails until [`FakeProducer::recover`];
//! - [`FakeProducer::delay`]: each send answers only after this long, waited with
//!   `tokio::time`, so a test on a paused clock (`start_paused`) spends no real time;
//! - [`FakeProducer::answer_at_most`]: a send answers (and keeps) only its first `k`
//!   records and says nothing of the rest, as a client that lost the tail of a
//!   batch would: the engine must treat the unanswered records as failed.
//!
//! Whether a send fails is decided when it answers (after the delay), as a real
//! broker's answer would be. Compiled for this crate's tests and, for other crates'
//! tests, with the `test-fakes` feature; never part of a normal build.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;

use super::error::ProduceError;
use super::interface::{BoxFuture, Producer};
use super::record::OutMsg;

/// An in-memory broker producer with failure knobs (see the module doc).
#[derive(Debug)]
pub struct FakeProducer {
    name: String,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    fail_next: u64,
    fail_always: bool,
    delay: Duration,
    answer_at_most: Option<usize>,
    /// Records acknowledged, per topic, in the order taken.
    kept: BTreeMap<String, Vec<OutMsg>>,
    sends: u64,
    failed_sends: u64,
    closed: bool,
}

impl FakeProducer {
    /// A healthy producer named `name` (the name the queue config gives it).
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The lock is never held across a panic that matters to a test's counts.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next `n` sends fail (added to any still pending).
    pub fn fail_next(&self, n: u64) {
        self.state().fail_next += n;
    }

    /// Every send fails from now on (`true`) or not (`false`).
    pub fn fail_always(&self, on: bool) {
        self.state().fail_always = on;
    }

    /// Healthy again: clears [`FakeProducer::fail_next`] and
    /// [`FakeProducer::fail_always`].
    pub fn recover(&self) {
        let mut s = self.state();
        s.fail_next = 0;
        s.fail_always = false;
    }

    /// Each send answers after `d` (tokio time).
    pub fn delay(&self, d: Duration) {
        self.state().delay = d;
    }

    /// Answer (and keep) at most `k` records per send; `None`: all of them.
    pub fn answer_at_most(&self, k: Option<usize>) {
        self.state().answer_at_most = k;
    }

    /// The records acknowledged on `topic`, in order (compound records as sent).
    pub fn records(&self, topic: &str) -> Vec<OutMsg> {
        self.state().kept.get(topic).cloned().unwrap_or_default()
    }

    /// The events acknowledged on `topic`, compound records unpacked, in order:
    /// `(key, payload)` each, the key being the event's own.
    pub fn events(&self, topic: &str) -> Vec<(String, Bytes)> {
        let mut out = Vec::new();
        for r in self.records(topic) {
            match proto::pack::unpack(r.payload.clone()) {
                Ok(events) => {
                    for e in events {
                        let key = match e.key {
                            Some(_) => e.key_str().to_string(),
                            None => r.key.clone(),
                        };
                        out.push((key, e.payload));
                    }
                }
                // A record the engine built is always a valid pack; keep it whole
                // so a test's count shows the oddity rather than hiding it.
                Err(_) => out.push((r.key.clone(), r.payload.clone())),
            }
        }
        out
    }

    /// Events acknowledged over every topic.
    pub fn event_count(&self) -> usize {
        let topics: Vec<String> = self.state().kept.keys().cloned().collect();
        topics.iter().map(|t| self.events(t).len()).sum()
    }

    /// `send_batch` calls so far (failed ones included).
    pub fn sends(&self) -> u64 {
        self.state().sends
    }

    /// `send_batch` calls that failed as a whole.
    pub fn failed_sends(&self) -> u64 {
        self.state().failed_sends
    }

    /// Whether `close` was called.
    pub fn closed(&self) -> bool {
        self.state().closed
    }
}

impl Producer for FakeProducer {
    fn name(&self) -> &str {
        &self.name
    }

    fn send_batch<'a>(
        &'a self,
        topic: &'a str,
        msgs: &'a [OutMsg],
    ) -> BoxFuture<'a, Vec<Result<(), ProduceError>>> {
        Box::pin(async move {
            let delay = {
                let mut s = self.state();
                s.sends += 1;
                s.delay
            };
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let mut s = self.state();
            let fail = if s.fail_always {
                true
            } else if s.fail_next > 0 {
                s.fail_next -= 1;
                true
            } else {
                false
            };
            if fail {
                s.failed_sends += 1;
                let err = ProduceError {
                    producer: self.name.clone(),
                    reason: "fake: told to fail".into(),
                };
                return vec![Err(err); msgs.len()];
            }
            let k = s.answer_at_most.unwrap_or(msgs.len()).min(msgs.len());
            s.kept
                .entry(topic.to_string())
                .or_default()
                .extend_from_slice(&msgs[..k]);
            vec![Ok(()); k]
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.state().closed = true;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(n: usize) -> Vec<OutMsg> {
        (0..n)
            .map(|i| OutMsg {
                key: format!("k{i}"),
                payload: Bytes::from(vec![1u8, u8::try_from(i).unwrap()]),
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn knobs_fail_shorten_and_delay_on_tokio_time() {
        let p = FakeProducer::new("a");
        p.fail_next(2);
        for _ in 0..2 {
            let r = p.send_batch("t", &msgs(3)).await;
            assert_eq!(r.len(), 3);
            assert!(r.iter().all(Result::is_err));
        }
        assert!(p.send_batch("t", &msgs(3)).await.iter().all(Result::is_ok));
        p.answer_at_most(Some(1));
        assert_eq!(p.send_batch("t", &msgs(3)).await.len(), 1);
        p.answer_at_most(None);
        p.fail_always(true);
        assert!(p.send_batch("t", &msgs(1)).await[0].is_err());
        p.recover();
        p.delay(Duration::from_secs(30));
        let t0 = tokio::time::Instant::now();
        assert!(p.send_batch("u", &msgs(1)).await[0].is_ok());
        assert_eq!(t0.elapsed(), Duration::from_secs(30));
        assert_eq!(p.records("t").len(), 4, "3 + the 1 answered");
        assert_eq!(
            p.events("u"),
            vec![("k0".to_string(), msgs(1)[0].payload.clone())]
        );
        assert_eq!((p.sends(), p.failed_sends(), p.event_count()), (6, 3, 5));
        p.close().await;
        assert!(p.closed());
    }
}
