//! A reward service in-process, with test downstreams over HTTP, and the test's world
//! around it ([`Setup`]).

use std::path::{Path, PathBuf};

use super::{CREDENTIAL, create_topics, dir, sdk_section, tag};

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
