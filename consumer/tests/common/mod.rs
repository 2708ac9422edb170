//! Shared set-up for the consumer's tests: the local stack (`ops/stack up`), a reward
//! service in-process, test downstreams over HTTP, topics and configs named by a tag.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fred::prelude::*;
use prost::Message as _;
use proto::v1::{DeadLetter, RewardEvent};
use reward_consumer::config::ConsumerConfig;
use reward_service::downstream::Ledger;
use reward_tools::stack::{QueueSpec, SdkSection};

#[allow(unused_imports)] // each test file uses its own part of the kit
pub use reward_testkit::{CREDENTIAL, event, stack};

pub fn tag(prefix: &str) -> String {
    reward_testkit::unique(prefix)
}

pub fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("consumer-{tag}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn events_topic(tag: &str) -> String {
    format!("ev-{tag}")
}
pub fn dead_topic(tag: &str) -> String {
    format!("dead-{tag}")
}
pub fn failures_topic(tag: &str) -> String {
    format!("fail-{tag}")
}
/// The `special` queue's topic, on RocketMQ.
pub fn special_topic(tag: &str) -> String {
    format!("sp-{tag}")
}

pub async fn create_topics(tag: &str) {
    let s = stack();
    let t = [events_topic(tag), dead_topic(tag), failures_topic(tag)];
    let t: Vec<&str> = t.iter().map(String::as_str).collect();
    reward_tools::topics::create_kafka_topics(&s.kafka_brokers, &t, 2)
        .await
        .unwrap();
    reward_tools::topics::create_rocketmq_topics(&s.rocketmq_namesrv, &[&special_topic(tag)])
        .await
        .unwrap();
}

/// The `[sdk]` section both the service and the consumer use: queues `massive`
/// (events), `dead` and `failures`, all on Kafka, and `special` on RocketMQ (nothing
/// is routed there: the RocketMQ test names it).
pub fn sdk_section(tag: &str, dir: &Path, who: &str) -> String {
    let s = stack();
    let topics = [
        events_topic(tag),
        special_topic(tag),
        dead_topic(tag),
        failures_topic(tag),
    ];
    let queue = |i: usize, name, producer| QueueSpec {
        name,
        topic: &topics[i],
        primary: producer,
        backup: producer,
        ratio: 100,
    };
    SdkSection {
        env: &s,
        keys_file: &dir.join("keys"),
        ttl_secs: 3600,
        store_prefix: &format!("tok-{tag}"),
        store_timeout_ms: Some(10_000),
        rocketmq_group: &format!("p-{tag}"),
        queues: &[
            queue(0, "massive", "kafka"),
            queue(1, "special", "rocketmq"),
            queue(2, "dead", "kafka"),
            queue(3, "failures", "kafka"),
        ],
        types: &[
            ("cash", None),
            ("coin", None),
            ("coupon", None),
            ("flaky", None),
            ("broken", None),
        ],
        spool: &dir.join(format!("spool-{who}")),
    }
    .toml()
}

/// A local HTTP downstream: `/flaky` always answers 503 saying it credited nothing
/// (so each failure is retryable, never in doubt), `/broken` always 400.
pub async fn test_downstream() -> String {
    use axum::Router;
    use axum::http::StatusCode;
    use axum::routing::post;
    let app = Router::new()
        .route(
            "/flaky",
            post(|| async {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(serde_json::json!({"code": "NOT_CREDITED"})),
                )
            }),
        )
        .route("/broken", post(|| async { StatusCode::BAD_REQUEST }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{addr}")
}

/// Starts a reward service (ledger for cash, coin, coupon; `flaky` and `broken`
/// over HTTP) with budget `cny/rain` = 10^12.
pub async fn service(tag: &str, dir: &Path) -> reward_service::server::Running {
    service_with(tag, dir, "").await
}

/// As `service`, with `extra` TOML tables in its config (e.g. `[events]`).
pub async fn service_with(tag: &str, dir: &Path, extra: &str) -> reward_service::server::Running {
    std::fs::write(
        dir.join("keys"),
        sdk::token::KeyRing::random(1).to_text().as_bytes(),
    )
    .unwrap();
    let http = test_downstream().await;
    let text = format!(
        r#"
        [server]
        grpc_addr = "127.0.0.1:0"
        http_addr = "127.0.0.1:0"
        max_batch = 1000
        shutdown_grace_ms = 5000
        [claims]
        key_prefix = "svc-{tag}"
        shards = 4
        lease_ms = 15000
        retention_secs = 3600
        [budgets]
        "cny/rain" = 1000000000000
        [downstreams.cash]
        kind = "ledger"
        [downstreams.coin]
        kind = "ledger"
        [downstreams.coupon]
        kind = "ledger"
        [downstreams.flaky]
        kind = "http"
        url = "{http}/flaky"
        timeout_ms = 2000
        [downstreams.broken]
        kind = "http"
        url = "{http}/broken"
        timeout_ms = 2000
        [ledger]
        key_prefix = "ledger-{tag}"
        [failures]
        archive = "{archive}"
        queue = "failures"
        {extra}
        {sdk}
        "#,
        archive = dir.join("failures.jsonl").display(),
        sdk = sdk_section(tag, dir, "service"),
    );
    let env = vec![
        ("REWARD_SERVICE_TOKEN".to_string(), CREDENTIAL.to_string()),
        (
            "REWARD_WALLET_TOKEN".to_string(),
            "test-wallet-credential-0123456789".to_string(),
        ),
    ];
    let cfg = reward_service::config::ServiceConfig::from_toml_str(&text, &env)
        .unwrap_or_else(|e| panic!("service config: {e}"));
    reward_service::server::start(&cfg).await.unwrap()
}

/// A test's world: its tag, directory, topics and a reward service.
pub struct Setup {
    pub tag: String,
    pub dir: PathBuf,
    pub svc: reward_service::server::Running,
    /// The service's gRPC URL.
    pub grpc: String,
}

/// Names a test by `prefix`, creates its topics and starts its reward service.
pub async fn setup(prefix: &str) -> Setup {
    setup_with(prefix, "").await
}

/// As `setup`, with `extra` TOML tables in the service's config.
pub async fn setup_with(prefix: &str, extra: &str) -> Setup {
    let tag = tag(prefix);
    let dir = dir(&tag);
    create_topics(&tag).await;
    let svc = service_with(&tag, &dir, extra).await;
    let grpc = format!("http://{}", svc.grpc_addr);
    Setup {
        tag,
        dir,
        svc,
        grpc,
    }
}

/// Puts events and raw payloads on virtual queue `queue` with a producer of its own,
/// and returns once they are all on the broker.
pub async fn publish(tag: &str, dir: &Path, queue: &str, events: &[RewardEvent], raw: &[&[u8]]) {
    let producer = producer(tag, dir).await;
    produce_to(&producer, queue, events, raw).await;
    producer.close(Duration::from_secs(30)).await;
}

/// The consumer's config text: group `g-{tag}` on the events topic, the service at
/// `grpc`, limits changed live through the Redis hash `cfg-{tag}`; `pipeline` and
/// `limits` are extra TOML lines of those sections.
pub fn consumer_text(tag: &str, dir: &Path, grpc: &str, pipeline: &str, limits: &str) -> String {
    let s = stack();
    format!(
        r#"
        [source]
        kind = "kafka"
        brokers = "{kafka}"
        group = "g-{tag}"
        topics = ["{ev}"]
        [pipeline]
        commit_interval_ms = 200
        backoff_initial_ms = 20
        backoff_max_ms = 100
        limited_delay_ms = 300
        fused_delay_ms = 300
        {pipeline}
        [service]
        grpc = "{grpc}"
        [delay]
        key_prefix = "delay-{tag}"
        shards = 4
        poll_ms = 50
        lease_ms = 5000
        [limits]
        {limits}
        [fleet]
        key_prefix = "fleet-{tag}"
        [dynamic]
        redis_key = "cfg-{tag}"
        poll_ms = 200
        {sdk}
        "#,
        kafka = s.kafka_brokers,
        ev = events_topic(tag),
        sdk = sdk_section(tag, dir, &format!("consumer-{:04x}", rand::random::<u16>())),
    )
}

pub fn consumer_config(text: &str) -> ConsumerConfig {
    let env = vec![("REWARD_SERVICE_TOKEN".to_string(), CREDENTIAL.to_string())];
    ConsumerConfig::from_toml_str(text, &env).unwrap_or_else(|e| panic!("consumer config: {e}"))
}

/// An SDK on the test's queues, to put events on the events topic.
pub async fn producer(tag: &str, dir: &Path) -> sdk::Sdk {
    let text = sdk_section(tag, dir, &format!("producer-{:04x}", rand::random::<u16>()));
    let doc: toml::Table = text.parse().unwrap();
    let cfg = sdk::config::SdkConfig::from_table(doc["sdk"].as_table().unwrap()).unwrap();
    sdk::Sdk::builder(cfg).start().await.unwrap()
}

/// Puts events (and raw payloads) on the events topic and waits until all are on it.
pub async fn produce(sdk: &sdk::Sdk, events: &[RewardEvent], raw: &[&[u8]]) {
    produce_to(sdk, "massive", events, raw).await;
}

/// As `produce`, to the virtual queue `queue`. Events are signed under the SDK's keys
/// (the test's ring, the service's too) as `send_reward` signs them; `raw` payloads go
/// as they are.
pub async fn produce_to(sdk: &sdk::Sdk, queue: &str, events: &[RewardEvent], raw: &[&[u8]]) {
    let signed: Vec<RewardEvent> = events
        .iter()
        .map(|e| {
            let mut e = e.clone();
            sdk.codec().proofs().sign(&mut e);
            e
        })
        .collect();
    let raw_events: Vec<Vec<u8>> = signed.iter().map(|e| e.encode_to_vec()).collect();
    let mut all: Vec<&[u8]> = raw_events.iter().map(Vec::as_slice).collect();
    all.extend_from_slice(raw);
    put(
        sdk,
        queue,
        &signed,
        &all[..signed.len()],
        &all[signed.len()..],
    )
    .await;
}

/// Puts events exactly as given (no proof added: what a foreign producer writes) on
/// the virtual queue `queue`, and waits until all are on it.
pub async fn produce_unsigned(sdk: &sdk::Sdk, queue: &str, events: &[RewardEvent]) {
    let encoded: Vec<Vec<u8>> = events.iter().map(|e| e.encode_to_vec()).collect();
    let payloads: Vec<&[u8]> = encoded.iter().map(Vec::as_slice).collect();
    put(sdk, queue, events, &payloads, &[]).await;
}

async fn put(
    sdk: &sdk::Sdk,
    queue: &str,
    events: &[RewardEvent],
    payloads: &[&[u8]],
    raw: &[&[u8]],
) {
    for (e, p) in events.iter().zip(payloads) {
        let user = e
            .user
            .as_ref()
            .map(|u| u.user_id.clone())
            .unwrap_or_default();
        sdk.enqueue(
            Some(queue),
            None,
            &user,
            e.trade_no.clone(),
            Bytes::copy_from_slice(p),
        )
        .await
        .unwrap();
    }
    for (i, r) in raw.iter().enumerate() {
        sdk.enqueue(
            Some(queue),
            None,
            "poison",
            format!("poison-{i}"),
            Bytes::copy_from_slice(r),
        )
        .await
        .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while sdk.stats().unsettled > 0 {
        assert!(
            Instant::now() < deadline,
            "events not delivered: {:?}",
            sdk.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(sdk.stats().spooled, 0, "test events went to the spool");
}

pub async fn ledger(tag: &str) -> Ledger {
    Ledger::connect(
        &stack().redis_url,
        &format!("ledger-{tag}"),
        &HashMap::new(),
    )
    .await
    .unwrap()
}

pub async fn redis() -> Client {
    let c = Builder::from_config(Config::from_url(&stack().redis_url).unwrap())
        .build()
        .unwrap();
    c.init().await.unwrap();
    c
}

/// How many distinct trade numbers the ledger credited to `user`.
pub async fn credited(redis: &Client, tag: &str, user: &str) -> i64 {
    redis
        .hlen(format!("ledger-{tag}:ledger:{{{user}}}:credited"))
        .await
        .unwrap()
}

/// Waits until `check` holds, polling; panics with `what` after `secs`.
pub async fn wait_for<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The dead letters on a topic, read back from the start.
pub async fn dead_letters(topic: &str, want: usize) -> Vec<DeadLetter> {
    let kafka = stack().kafka_brokers;
    let topic = topic.to_string();
    let rb = tokio::task::spawn_blocking(move || {
        reward_testkit::readback::read_kafka(&kafka, &topic, usize::MAX, Duration::from_secs(20))
    })
    .await
    .unwrap()
    .unwrap();
    let letters: Vec<DeadLetter> = rb
        .payloads
        .iter()
        .map(|p| DeadLetter::decode(p.as_slice()).unwrap())
        .collect();
    assert!(
        letters.len() >= want,
        "{} of {want} dead letters",
        letters.len()
    );
    letters
}

/// What the ledger's own credit times say about one user's credits over a window.
pub struct Rate {
    /// Credits per second over the whole window.
    pub per_sec: f64,
    /// Most credits in any 1 s within it (sliding by 50 ms).
    pub peak_1s: usize,
    /// Credits in each whole second of the window (for the failure message).
    pub seconds: Vec<usize>,
}

/// The credits of `user` over the next `secs`, measured from the credit time the
/// ledger stamps on each one, not from when this test process happened to read a
/// balance: on a busy machine the test's own reads can be late, enough to skew a
/// few seconds' sample past the bounds (docs/findings/benchmarks-history.md). The
/// window closes 500 ms before the read, so every credit stamped in it has landed.
pub async fn rate(ledger: &reward_service::downstream::Ledger, user: &str, secs: f64) -> Rate {
    let from = reward_runtime::clock::now_ms();
    tokio::time::sleep(Duration::from_secs_f64(secs + 0.5)).await;
    let to = from + (secs * 1000.0) as i64;
    let mut at: Vec<i64> = ledger
        .account(user)
        .await
        .unwrap()
        .credited
        .into_values()
        .filter(|t| (from..to).contains(t))
        .collect();
    at.sort_unstable();
    let mut peak_1s = 0;
    let mut start = from;
    while start + 1000 <= to {
        let n = at
            .iter()
            .filter(|t| (start..start + 1000).contains(*t))
            .count();
        peak_1s = peak_1s.max(n);
        start += 50;
    }
    let seconds = (0..secs as i64)
        .map(|i| {
            let s = from + i * 1000;
            at.iter().filter(|t| (s..s + 1000).contains(*t)).count()
        })
        .collect();
    Rate {
        per_sec: at.len() as f64 / secs,
        peak_1s,
        seconds,
    }
}

/// The rate tests run one at a time: side by side on a busy 2-core machine (debug
/// builds, a CPU hog beside the suite), one consumer crediting one user's coupons
/// falls well short of its 200/s, on the single node and on a cluster, which measures
/// the machine, not the limiter (docs/findings/benchmarks-history.md); alone it holds
/// the limit.
pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static RATES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    RATES.lock().await
}
