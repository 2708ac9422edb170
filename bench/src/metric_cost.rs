//! `reward-bench metric-cost`: what the metrics `send_reward` records cost a call, as
//! a number of nanoseconds rather than a share of an end-to-end rate that swings
//! between runs on a shared machine.
//!
//! Each of `threads` threads repeats, `calls` times, exactly what an accepted
//! `send_reward` records (`sdk::calls` and the queue and store it feeds): the buffer
//! and token-write gauges up and down once each, the outcome counter, the latency
//! histogram (with its `Instant::now`), the stored-token counter. With the Prometheus
//! recorder installed (the default, as in the binaries) that is the metrics' real
//! work; with `--no-metrics` every call is a no-op and what is left is the loop and
//! the clock. The difference, against the CPU a `send_reward` takes, is their cost.

use std::time::Instant;

use reward_runtime::counters::{Counted, Timing};

/// Nanoseconds a call over all threads (wall time × threads / calls).
pub fn run(calls: u64, threads: usize) -> f64 {
    let outcome = std::sync::Arc::new(Counted::new(
        "reward_sdk_calls_total",
        &[("outcome", "accepted")],
    ));
    let latency = std::sync::Arc::new(Timing::new("reward_sdk_send_reward_seconds"));
    let stored = std::sync::Arc::new(Counted::new("reward_sdk_tokens_stored_total", &[]));
    let buffer = metrics::gauge!("reward_sdk_buffer_events");
    let pending = metrics::gauge!("reward_sdk_token_writes_pending");
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (outcome, latency, stored) = (outcome.clone(), latency.clone(), stored.clone());
            let (buffer, pending) = (buffer.clone(), pending.clone());
            s.spawn(move || {
                for _ in 0..calls {
                    let t = Instant::now();
                    buffer.increment(1.0);
                    pending.increment(1.0);
                    outcome.inc();
                    latency.record(t.elapsed().as_secs_f64());
                    stored.inc();
                    pending.decrement(1.0);
                    buffer.decrement(1.0);
                }
            });
        }
    });
    let threads_f = threads.max(1) as f64;
    started.elapsed().as_nanos() as f64 * threads_f / (calls as f64 * threads_f)
}
