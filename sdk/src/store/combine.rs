//! Direct-mode writes that arrive together leave together: one script call for all the
//! attempts waiting when a call slot frees, on a single Redis (not a cluster).
//!
//! # Why
//! A script call costs on both sides beyond its commands: the client writes every
//! call to its socket on its own (fred flushes after each `EVALSHA`, in a pipeline
//! too), and Redis parses, looks up and sets up each call. Under load many writes wait
//! at the same moment; sending them as one
//! [`INDEXED_WRITE_MANY_LUA`](super::life::INDEXED_WRITE_MANY_LUA) call pays that
//! once (docs/findings/benchmarks-history.md, "Calls, not commands"). What a write
//! costs Redis is mostly its commands run from Lua and written to the AOF, not the
//! call around them.
//!
//! # How
//! No task stands between a caller and Redis. A caller queues its attempt, then waits
//! for its answer or for one of `pool_size` call slots, whichever comes first. A caller
//! that gets a slot takes the oldest waiting attempts (up to
//! [`WRITES_PER_CALL`](super::writer::WRITES_PER_CALL), its own among them or ahead of
//! it), sends them as one call, answers each, and gives the slot back. A call of one
//! write (the caller's own) runs in the caller's own time; a call carrying others'
//! writes runs on a task of its own, holding its slot to its end, so a caller whose
//! deadline passes never fails the writes it carried. A caller whose attempt another
//! caller took only waits for its answer. So with a slot free an
//! attempt goes at once, alone, as the single-write script it always was (no added
//! latency when the store is quiet); only while every slot is busy do attempts gather,
//! and the busier Redis is (slower answers), the more go in one call.
//!
//! # What stays as it was
//! Each write in a call is decided exactly as alone (the many-writes script runs the
//! single script's steps per write, in order), its due entry first; a write is answered
//! only with its own outcome. A write whose call failed or timed out is in doubt and
//! retried by its caller; a repeated write stores nothing twice (same field, same
//! value). A waiting attempt whose caller went away is not sent.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use fred::prelude::*;
use reward_runtime::script::Script;
use tokio::sync::{Semaphore, oneshot};

use super::answer::write_reply;
use super::stats::StoreStats;
use super::writer::WRITES_PER_CALL;

/// One caller's attempt, waiting for a call.
struct Attempt {
    seq: u64,
    /// Due shard key, member, score (ms).
    due: (String, String, f64),
    key: String,
    field: String,
    value: String,
    tx: oneshot::Sender<Result<i64, fred::error::Error>>,
}

#[derive(Default)]
struct Queue {
    /// The sequence number the next attempt gets (from 1).
    next: u64,
    /// Every attempt up to this number has been taken by a sender.
    taken: u64,
    waiting: VecDeque<Attempt>,
}

/// The waiting attempts and the call slots of one store.
pub(super) struct Combiner {
    queue: Mutex<Queue>,
    slots: Arc<Semaphore>,
    /// The single write with its due entry ([`super::life::INDEXED_WRITE_LUA`]).
    one: Script,
    /// Many writes with their due entries ([`super::life::INDEXED_WRITE_MANY_LUA`]).
    many: Script,
    cap: i64,
    ttl: i64,
}

/// The error of an attempt whose call was dropped before its answer: it may or may not
/// have landed.
fn dropped() -> fred::error::Error {
    fred::error::Error::new(
        fred::error::ErrorKind::Canceled,
        "token write: the call carrying it was dropped before its answer (it may have landed)",
    )
}

impl Combiner {
    pub(super) fn new(one: Script, many: Script, slots: usize, cap: u32, ttl: i64) -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
            slots: Arc::new(Semaphore::new(slots.max(1))),
            one,
            many,
            cap: i64::from(cap),
            ttl,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // A panic elsewhere while holding the lock leaves the queue whole (every change
        // is one push or one drain): keep using it.
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One attempt of a write: its answer, from a call this caller sent or another did.
    pub(super) async fn attempt(
        self: &Arc<Self>,
        pool: &Pool,
        stats: &StoreStats,
        due: &(String, String, f64),
        key: &str,
        field: &str,
        value: &str,
    ) -> Result<i64, fred::error::Error> {
        let (tx, mut rx) = oneshot::channel();
        let seq = {
            let mut q = self.lock();
            q.next += 1;
            let seq = q.next;
            q.waiting.push_back(Attempt {
                seq,
                due: due.clone(),
                key: key.to_string(),
                field: field.to_string(),
                value: value.to_string(),
                tx,
            });
            seq
        };
        loop {
            if self.lock().taken >= seq {
                return rx.await.unwrap_or_else(|_| Err(dropped()));
            }
            tokio::select! {
                biased;
                answer = &mut rx => return answer.unwrap_or_else(|_| Err(dropped())),
                slot = self.slots.clone().acquire_owned() => {
                    let Ok(slot) = slot else {
                        return Err(dropped());
                    };
                    let calls = self.take(seq);
                    if calls.is_empty() {
                        continue;
                    }
                    stats.direct_calls.fetch_add(1, Ordering::Relaxed);
                    let client = pool.next().clone();
                    if calls.len() == 1 && calls[0].seq == seq {
                        // Alone: sent in this caller's own time, no task hop.
                        self.send(&client, calls).await;
                    } else {
                        // Others' writes ride along: the call must not die with this
                        // caller's deadline (they would all be in doubt, and Redis
                        // would still run it), and it holds its slot to its end.
                        let me = Arc::clone(self);
                        tokio::spawn(async move {
                            me.send(&client, calls).await;
                            drop(slot);
                        });
                    }
                }
            }
        }
    }

    /// The oldest waiting attempts whose callers still wait, up to a call's worth; none
    /// when attempt `seq` was taken by another sender already (checked under the same
    /// lock: the slot is not this caller's to spend on others' writes alone).
    fn take(&self, seq: u64) -> Vec<Attempt> {
        let mut q = self.lock();
        let mut out = Vec::new();
        if q.taken >= seq {
            return out;
        }
        while out.len() < WRITES_PER_CALL {
            let Some(a) = q.waiting.pop_front() else {
                break;
            };
            q.taken = a.seq;
            if !a.tx.is_closed() {
                out.push(a);
            }
        }
        out
    }

    /// Sends `calls` as one script call and answers each.
    async fn send(&self, client: &Client, calls: Vec<Attempt>) {
        if let [a] = calls.as_slice() {
            let reply = self
                .one
                .eval(client, || {
                    (
                        vec![a.key.clone(), a.due.0.clone()],
                        vec![
                            Value::from(a.field.as_str()),
                            Value::from(a.value.as_str()),
                            Value::from(self.cap),
                            Value::from(self.ttl),
                            Value::from(a.due.2),
                            Value::from(a.due.1.as_str()),
                        ],
                    )
                })
                .await;
            for a in calls {
                let _ = a.tx.send(reply.clone());
            }
            return;
        }
        let reply: Result<Value, fred::error::Error> = self
            .many
            .eval(client, || {
                let mut keys = Vec::with_capacity(calls.len() * 2);
                keys.extend(calls.iter().map(|a| a.key.clone()));
                keys.extend(calls.iter().map(|a| a.due.0.clone()));
                let mut args = Vec::with_capacity(2 + calls.len() * 4);
                args.push(Value::from(self.cap));
                args.push(Value::from(self.ttl));
                for a in &calls {
                    args.push(Value::from(a.field.as_str()));
                    args.push(Value::from(a.value.as_str()));
                }
                for a in &calls {
                    args.push(Value::from(a.due.2));
                    args.push(Value::from(a.due.1.as_str()));
                }
                (keys, args)
            })
            .await;
        match reply {
            Ok(Value::Array(items)) if items.len() == calls.len() => {
                for (a, item) in calls.into_iter().zip(items) {
                    let _ = a.tx.send(write_reply(item));
                }
            }
            Ok(other) => {
                let e = fred::error::Error::new(
                    fred::error::ErrorKind::Protocol,
                    format!("a write script call answered {other:?}"),
                );
                for a in calls {
                    let _ = a.tx.send(Err(e.clone()));
                }
            }
            Err(e) => {
                for a in calls {
                    let _ = a.tx.send(Err(e.clone()));
                }
            }
        }
    }
}
