//! The SDK side of `reward-bench send`: the SDK under test started on its own topic, the
//! full-speed throughput run, the paced latency run, and the checks that every
//! accepted event was delivered and every token written.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use reward_baseline::figures::micros;
use reward_baseline::producer::rewards;
use reward_baseline::{Percentiles, RunError, Throughput};
use reward_stack::env::StackEnv;
use sdk::config::SdkConfig;
use sdk::request::RewardRequest;
use sdk::token::KeyRing;
use sdk::{Sdk, SendError};

use super::{BenchError, Paced, SdkSide};

/// The SDK's config (one Kafka producer, queue `bench` on `topic`, key prefix `tag`):
/// the same for the in-process SDK and the agent's.
pub(super) fn sdk_toml(env: &StackEnv, side: &SdkSide<'_>, tag: &str, topic: &str) -> String {
    let settings = reward_stack::env::kafka_settings_toml(side.kafka);
    let spool = std::env::temp_dir().join(format!("reward-{tag}-spool"));
    format!(
        r#"
        default_queue = "bench"
        [store]
        redis_url = "{redis}"
        key_prefix = "{tag}"
        ttl_secs = 600
        write_mode = "{write_mode}"
        [producers.k]
        kind = "kafka"
        brokers = "{kafka}"
        {settings}
        [queues.bench]
        topic = "{topic}"
        primary = "k"
        backup = "k"
        ratio = 100
        [types.cash]
        [spool]
        dir = "{spool}"
        "#,
        redis = env.redis_url,
        kafka = env.kafka_brokers,
        spool = spool.display(),
        write_mode = side.write_mode,
    )
}

async fn start_sdk(
    env: &StackEnv,
    side: &SdkSide<'_>,
    tag: &str,
    topic: &str,
) -> Result<Sdk, BenchError> {
    let text = sdk_toml(env, side, tag, topic);
    // The overrides an operator gives every SDK apply here too, e.g.
    // `REWARD_SDK__STORE__ANSWER_FROM_QUEUE=false` to measure without the race.
    let config =
        SdkConfig::from_toml_str_with_env(&text).map_err(|e| RunError::Setup(e.to_string()))?;
    Sdk::builder(config)
        .key_ring(KeyRing::random(1))
        .watch(false)
        .start()
        .await
        .map_err(|e| RunError::Setup(format!("sdk: {e}")).into())
}

/// Waits until the SDK has every accepted event delivered by the broker and every
/// accepted token stored in Redis (a reward counts only when both are true: a backlog
/// of unstored tokens left at the end of a timed run is not throughput, whatever the
/// write mode); fails if it spooled or logged any event (the broker refused them), if
/// a token write was given up, or after `limit`.
async fn wait_delivered(
    sdk: &Sdk,
    want: u64,
    run: &'static str,
    limit: Duration,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + limit;
    loop {
        let s = sdk.stats();
        let stored = sdk.store().stats().written.load(Ordering::Acquire);
        let unstored = sdk.token_write_failures();
        if unstored > 0 {
            return Err(RunError::Incomplete {
                run,
                what: format!("{unstored} token writes failed"),
            }
            .into());
        }
        if s.spooled > 0 || s.logged > 0 {
            return Err(RunError::Incomplete {
                run,
                what: format!(
                    "{} spooled, {} logged: the broker refused events",
                    s.spooled, s.logged
                ),
            }
            .into());
        }
        if s.delivered >= want && stored >= want {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(RunError::Incomplete {
                run,
                what: format!(
                    "{} of {want} delivered and {stored} stored within {limit:?}",
                    s.delivered
                ),
            }
            .into());
        }
        // Coarse enough not to take CPU from the run being timed (2 cores), fine
        // enough to be noise on runs of seconds.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn finish(sdk: &Sdk, run: &'static str) -> Result<(), BenchError> {
    let report = sdk.close(Duration::from_secs(30)).await;
    // Read after close: deferred writes are answered by then.
    let failures = sdk.token_write_failures();
    if report.left > 0 || report.tokens_left > 0 {
        return Err(RunError::Incomplete {
            run,
            what: format!(
                "{} events and {} token writes unsettled at close",
                report.left, report.tokens_left
            ),
        }
        .into());
    }
    if failures > 0 {
        return Err(RunError::Incomplete {
            run,
            what: format!("{failures} token writes failed"),
        }
        .into());
    }
    Ok(())
}

pub(super) async fn sdk_run(
    env: &StackEnv,
    side: &SdkSide<'_>,
    tag: &str,
    topic: &str,
    reqs: Vec<RewardRequest>,
    concurrency: usize,
) -> Result<Throughput, BenchError> {
    let sdk = start_sdk(env, side, tag, topic).await?;
    let n = reqs.len() as u64;
    let concurrency = concurrency.max(1);
    // Deal the requests out before the clock starts.
    let mut shares: Vec<Vec<RewardRequest>> = (0..concurrency).map(|_| Vec::new()).collect();
    for (i, r) in reqs.into_iter().enumerate() {
        shares[i % concurrency].push(r);
    }
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for share in shares {
        let sdk = sdk.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(share.len());
            for r in share {
                let t = Instant::now();
                loop {
                    match sdk.send_reward(r.clone()).await {
                        Ok(_) => break,
                        // Back-pressure is the SDK asking the caller to slow down: a
                        // caller at full speed retries, as a real one would.
                        Err(SendError::Backpressure(_)) => tokio::task::yield_now().await,
                        Err(e) => return Err(format!("{}: {e}", r.trade_no)),
                    }
                }
                lat.push(micros(t.elapsed()));
            }
            Ok(lat)
        }));
    }
    let mut calls = Vec::with_capacity(n as usize);
    for t in tasks {
        match t.await {
            Ok(Ok(l)) => calls.extend(l),
            Ok(Err(e)) => {
                return Err(RunError::Incomplete {
                    run: "sdk",
                    what: format!("send_reward refused {e}"),
                }
                .into());
            }
            Err(e) => {
                return Err(RunError::Incomplete {
                    run: "sdk",
                    what: format!("caller task: {e}"),
                }
                .into());
            }
        }
    }
    wait_delivered(&sdk, n, "sdk", Duration::from_secs(120)).await?;
    let elapsed = start.elapsed();
    finish(&sdk, "sdk").await?;
    Ok(Throughput {
        events: n,
        elapsed,
        calls: Percentiles::of(&mut calls),
    })
}

pub(super) async fn paced_run(
    env: &StackEnv,
    side: &SdkSide<'_>,
    tag: &str,
    topic: &str,
    rate: f64,
    secs: u64,
) -> Result<Paced, BenchError> {
    let sdk = start_sdk(env, side, tag, topic).await?;
    let total = ((rate * secs as f64) as u64).max(1);
    let caller = sdk.clone();
    let calls = pace(rewards(tag, total), rate, move |r: RewardRequest| {
        let sdk = caller.clone();
        async move {
            sdk.send_reward(r)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await?;
    wait_delivered(&sdk, calls.accepted(), "paced", Duration::from_secs(120)).await?;
    finish(&sdk, "paced").await?;
    Ok(calls.report(rate, "paced run"))
}

/// What a paced run's calls saw.
pub(super) struct PacedCalls {
    from_schedule: Vec<u64>,
    own: Vec<u64>,
    refused: u64,
    first_refusal: Option<String>,
    sent_for: Duration,
}

impl PacedCalls {
    /// Calls answered (the run then waits for this many events delivered).
    pub(super) fn accepted(&self) -> u64 {
        self.own.len() as u64
    }

    /// The figures, with the first refusal printed if any.
    pub(super) fn report(mut self, rate: f64, run: &str) -> Paced {
        if let Some(e) = &self.first_refusal {
            eprintln!("[bench] {run}: {} calls refused, first: {e}", self.refused);
        }
        Paced {
            target_rate: rate,
            achieved_rate: self.accepted() as f64 / self.sent_for.as_secs_f64().max(1e-9),
            latency: Percentiles::of(&mut self.from_schedule),
            call: Percentiles::of(&mut self.own),
            refused: self.refused,
        }
    }
}

/// Calls `call` once for each item at `rate` a second, each spawned on the runtime when
/// it is due, so a slow call never delays the next. The pacer is a blocking thread
/// sleeping with the OS's timer (see the module doc for why not a tokio timer); each
/// call is timed from its due moment and from its own start.
pub(super) async fn pace<T, F, Fut>(
    items: Vec<T>,
    rate: f64,
    call: F,
) -> Result<PacedCalls, BenchError>
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let total = items.len();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Result<(u64, u64), String>>();
    let start = Instant::now();
    let period = Duration::from_secs_f64(1.0 / rate);
    let runtime = tokio::runtime::Handle::current();
    let pacer = tokio::task::spawn_blocking(move || {
        for (i, item) in items.into_iter().enumerate() {
            let due = start + period.mul_f64(i as f64);
            let now = Instant::now();
            // Calls due within 50 µs go at once: one sleep a call would cost more than
            // the sleep's own precision at 10 k calls/s.
            if due > now + Duration::from_micros(50) {
                std::thread::sleep(due - now);
            }
            let (call, tx) = (call.clone(), tx.clone());
            runtime.spawn(async move {
                let begun = Instant::now();
                let out = call(item)
                    .await
                    .map(|()| (micros(due.elapsed()), micros(begun.elapsed())));
                let _ = tx.send(out);
            });
        }
    });
    let mut out = PacedCalls {
        from_schedule: Vec::with_capacity(total),
        own: Vec::with_capacity(total),
        refused: 0,
        first_refusal: None,
        sent_for: Duration::ZERO,
    };
    while let Some(r) = rx.recv().await {
        match r {
            Ok((from_schedule, own)) => {
                out.from_schedule.push(from_schedule);
                out.own.push(own);
            }
            Err(e) => {
                out.refused += 1;
                out.first_refusal.get_or_insert(e);
            }
        }
    }
    pacer
        .await
        .map_err(|e| RunError::Setup(format!("pacer thread: {e}")))?;
    out.sent_for = start.elapsed();
    Ok(out)
}
