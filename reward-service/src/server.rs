//! Building the service from its config, serving both APIs, shutting down gracefully.
//!
//! # Start-up
//! Connects the SDK (token store, key ring from `REWARD_TOKEN_KEYS[_FILE]`, virtual
//! queue), the claim store and the downstreams, sets the configured budgets, binds both
//! listeners (port 0 picks a free port; [`Running`] reports the real ones), then
//! serves. Any failure stops the start with an error naming the part.
//!
//! # Shutdown
//! On [`Running::shutdown`] (the binary calls it on SIGTERM or Ctrl-C) both listeners
//! stop accepting; calls in flight run to their end, up to `server.shutdown_grace_ms`;
//! then the SDK closes, which drains every async grant's event and every failure
//! record to a broker or its spool. A grant cut off by the grace period is safe: its
//! claim's lease runs out and the caller's retry takes it over.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::claim::Claims;
use crate::config::{DownstreamConfig, ServerConfig, ServiceConfig};
use crate::downstream::{Downstream, Ledger};
use crate::grant::{FailureTopic, Granter};
use crate::http::{HttpState, router};
use crate::service::Service;
use crate::tokens::Tokens;

/// Why the service did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The SDK did not start.
    #[error("sdk: {0}")]
    Sdk(#[from] sdk::StartError),
    /// The claim store did not connect.
    #[error(transparent)]
    Claims(#[from] crate::claim::ClaimError),
    /// A downstream could not be set up.
    #[error("downstream {0}: {1}")]
    Downstream(String, String),
    /// Redis failed while preparing the token scripts.
    #[error("token store: {0}")]
    Tokens(String),
    /// A listener could not bind.
    #[error("bind {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// The archive's directory could not be created.
    #[error("failure archive {0}: {1}")]
    Archive(std::path::PathBuf, std::io::Error),
}

/// Builds the service (without serving it).
pub async fn build(cfg: &ServiceConfig) -> Result<Service, StartError> {
    let sdk = sdk::Sdk::builder(cfg.sdk.clone())
        .watch(cfg.sdk.dynamic.file.is_some() || cfg.sdk.dynamic.redis_key.is_some())
        .start()
        .await?;
    let claims = Claims::connect(&cfg.redis_url, cfg.claims.clone()).await?;
    // Configured budgets are initial values: a live change is never overwritten.
    for (scope, total) in &cfg.budgets {
        if !claims.init_budget(scope, *total).await? {
            tracing::info!(
                scope,
                "budget already set; the configured value is not applied"
            );
        }
    }
    let mut capacity = HashMap::new();
    let mut ledger_types = Vec::new();
    for (ty, d) in &cfg.downstreams {
        if let DownstreamConfig::Ledger {
            capacity: c,
            honours_key,
        } = d
        {
            ledger_types.push((ty.clone(), *honours_key));
            if let Some(c) = c {
                capacity.insert(ty.clone(), *c);
            }
        }
    }
    let mut downstreams: HashMap<String, Arc<dyn Downstream>> = HashMap::new();
    if !ledger_types.is_empty() {
        let ledger = Ledger::connect(&cfg.ledger_redis_url, &cfg.ledger_prefix, &capacity)
            .await
            .map_err(|e| StartError::Downstream("ledger".into(), e.to_string()))?;
        // One connection, one view per key contract.
        let strict: Arc<dyn Downstream> = Arc::new(ledger.clone());
        let keyed: Arc<dyn Downstream> = Arc::new(ledger.honouring_key(true));
        for (ty, honours_key) in ledger_types {
            let d = if honours_key { &keyed } else { &strict };
            downstreams.insert(ty, d.clone());
        }
    }
    for (ty, d) in &cfg.downstreams {
        if matches!(d, DownstreamConfig::Http { .. }) {
            let h = d
                .http()
                .map_err(|e| StartError::Downstream(ty.clone(), e))?;
            downstreams.insert(ty.clone(), Arc::new(h));
        }
    }
    if let Some(dir) = cfg.archive.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| StartError::Archive(dir.to_path_buf(), e))?;
    }
    let tokens = Tokens::new(sdk.store().clone(), cfg.sdk.store.ttl_secs)
        .await
        .map_err(|e| StartError::Tokens(e.to_string()))?;
    let granter = Granter::new(claims, downstreams, cfg.archive.clone())
        .with_max_amounts(cfg.max_amounts.clone())
        .with_tokens(tokens.clone())
        .with_failure_topic(FailureTopic {
            sdk: sdk.clone(),
            queue: cfg.failure_queue.clone(),
        });
    if let Some(until) = cfg.events.accept_unproven_until_ms {
        let until_text = reward_runtime::clock::format_utc(until);
        if until <= reward_runtime::clock::now_ms() {
            tracing::warn!(until = %until_text,
                "[events] accept_unproven_until has passed: events without a proof are refused");
        } else {
            tracing::warn!(until = %until_text,
                "events without a proof are credited (and counted) until this time, then refused ([events] unproven = \"accept\")");
        }
    }
    Ok(Service::new(granter, tokens, sdk, cfg.server.max_batch).with_events(cfg.events))
}

/// A serving instance.
#[derive(Debug)]
pub struct Running {
    /// Where gRPC listens.
    pub grpc_addr: SocketAddr,
    /// Where HTTP listens.
    pub http_addr: SocketAddr,
    service: Service,
    stop: watch::Sender<bool>,
    grpc: JoinHandle<Result<(), tonic::transport::Error>>,
    http: JoinHandle<std::io::Result<()>>,
    /// The sweeper's task, when `[sweeper] enabled`.
    sweeper: Option<JoinHandle<()>>,
    grace: Duration,
}

/// Builds the service and serves both APIs.
pub async fn start(cfg: &ServiceConfig) -> Result<Running, StartError> {
    let service = build(cfg).await?;
    serve(service, cfg).await
}

/// Serves an already built service.
pub async fn serve(service: Service, cfg: &ServiceConfig) -> Result<Running, StartError> {
    serve_with_metrics(service, cfg, None).await
}

/// Serves an already built service, with `/metrics` on the HTTP port when given the
/// process's recorder ([`reward_runtime::admin::install_metrics`]). The gauges read
/// from Redis (`reward_service_budget_spent`, `reward_service_budget_remaining` per
/// scene, from the live budget, and `reward_service_in_doubt`) are measured at each
/// scrape ([`crate::gauges::refresh_gauges`]), so a scrape never shows a value older than itself,
/// the last one before a shutdown included.
pub async fn serve_with_metrics(
    service: Service,
    cfg: &ServiceConfig,
    metrics: Option<reward_runtime::admin::PrometheusHandle>,
) -> Result<Running, StartError> {
    if metrics.is_some() {
        register_metrics(cfg);
    }
    let s = &cfg.server;
    let Listeners {
        grpc: grpc_listener,
        http: http_listener,
        grpc_addr,
        http_addr,
    } = bind(s).await?;
    let (stop, stopped) = watch::channel(false);
    let sweeper = cfg.sweeper.enabled.then(|| {
        crate::sweeper::Sweeper::new(service.clone(), cfg.sweeper.clone()).spawn(stopped.clone())
    });
    let grpc = spawn_grpc(service.clone(), cfg, grpc_listener, stopped.clone());
    let http = spawn_http(service.clone(), cfg, http_listener, metrics, stopped);
    tracing::info!(%grpc_addr, %http_addr, "reward service serving");
    match &cfg.wallet.sessions {
        Some(c) => tracing::info!(
            key_ids = ?c.ring().ids().collect::<Vec<_>>(),
            minting_key = c.ring().current_id(),
            cors_origins = ?cfg.wallet.cors_origins,
            "wallet sessions on: the page at /wallet/ works"
        ),
        None => tracing::warn!(
            "wallet sessions off (no session keys): browsers' sessions are refused, only the wallet credential opens the wallet routes"
        ),
    }
    Ok(Running {
        grpc_addr,
        http_addr,
        service,
        stop,
        grpc,
        http,
        sweeper,
        grace: Duration::from_millis(s.shutdown_grace_ms),
    })
}

/// Describes every metric the service exports and registers its counters at 0
/// (`reward_runtime::catalogue`).
fn register_metrics(_cfg: &ServiceConfig) {
    use reward_runtime::catalogue::{Component, register};
    for c in [Component::Service, Component::Redis, Component::Config] {
        register(c);
    }
}

/// Both listeners, bound, and the addresses they really got (port 0 picks one).
struct Listeners {
    grpc: tokio::net::TcpListener,
    http: tokio::net::TcpListener,
    grpc_addr: SocketAddr,
    http_addr: SocketAddr,
}

/// Binds the gRPC, then the HTTP listener, then reads their real addresses.
async fn bind(s: &ServerConfig) -> Result<Listeners, StartError> {
    let grpc_listener = tokio::net::TcpListener::bind(s.grpc_addr)
        .await
        .map_err(|e| StartError::Bind(s.grpc_addr, e))?;
    let http_listener = tokio::net::TcpListener::bind(s.http_addr)
        .await
        .map_err(|e| StartError::Bind(s.http_addr, e))?;
    let grpc_addr = grpc_listener
        .local_addr()
        .map_err(|e| StartError::Bind(s.grpc_addr, e))?;
    let http_addr = http_listener
        .local_addr()
        .map_err(|e| StartError::Bind(s.http_addr, e))?;
    Ok(Listeners {
        grpc: grpc_listener,
        http: http_listener,
        grpc_addr,
        http_addr,
    })
}

/// Ends when the stop channel says true (or its sender is gone): a server's shutdown
/// signal.
async fn stop_signal(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Serves gRPC on `grpc_listener` until `stopped` says stop, on a task of its own.
fn spawn_grpc(
    service: Service,
    cfg: &ServiceConfig,
    grpc_listener: tokio::net::TcpListener,
    stopped: watch::Receiver<bool>,
) -> JoinHandle<Result<(), tonic::transport::Error>> {
    let s = &cfg.server;
    // A full batch of the largest events the pipeline's limits allow
    // (`proto::limits::MAX_EVENT_BYTES`), plus the message's own framing.
    // At least gRPC's customary 4 MiB, so a message with one oversized event decodes
    // and is answered INVALID_ARGUMENT naming it, rather than tonic's OUT_OF_RANGE.
    let per_event = proto::limits::MAX_EVENT_BYTES + 8;
    let max_message = s
        .max_body_bytes
        .max(s.max_batch.saturating_mul(per_event).saturating_add(64))
        .max(4 << 20);
    let admin_svc = crate::budget_api::server(
        service.granter().claims().clone(),
        cfg.trail_key.clone(),
        cfg.admin_credential.clone(),
    );
    let grpc_svc = crate::grpc::server(service, cfg.credential.clone(), max_message);
    let grpc_stop = stop_signal(stopped);
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(grpc_svc)
            .add_service(admin_svc)
            .serve_with_incoming_shutdown(
                // Without TCP_NODELAY a small answer waits for the peer's delayed ACK,
                // which stalls a small batch many times longer than its work takes.
                tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true)),
                grpc_stop,
            )
            .await
    })
}

/// Serves the wallet routes (and `/metrics` when given the recorder) on
/// `http_listener` until `stopped` says stop, on a task of its own.
fn spawn_http(
    service: Service,
    cfg: &ServiceConfig,
    http_listener: tokio::net::TcpListener,
    metrics: Option<reward_runtime::admin::PrometheusHandle>,
    stopped: watch::Receiver<bool>,
) -> JoinHandle<std::io::Result<()>> {
    let s = &cfg.server;
    let app = router(
        HttpState {
            service,
            credential: cfg.wallet_credential.clone(),
            metrics_credential: cfg
                .metrics_credential
                .clone()
                .unwrap_or_else(|| cfg.credential.clone()),
            max_tokens: s.max_tokens_per_request,
            max_body_bytes: s.max_body_bytes,
            sessions: cfg.wallet.sessions.clone(),
            cors_origins: cfg.wallet.cors_origins.clone(),
            budget_scenes: cfg.budgets.keys().cloned().collect(),
        },
        s.max_body_bytes,
        metrics,
    );
    let http_stop = stop_signal(stopped);
    tokio::spawn(async move {
        use axum::serve::ListenerExt as _;
        let http_listener = http_listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::warn!(error = %e, "TCP_NODELAY not set on a wallet connection");
            }
        });
        axum::serve(http_listener, app)
            .with_graceful_shutdown(http_stop)
            .await
    })
}

/// What a shutdown left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Whether both listeners finished their in-flight calls within the grace period.
    pub drained: bool,
    /// Events the SDK could neither deliver nor spool (0 on a clean close).
    pub left: u64,
}

/// Waits for a server task until `deadline`; aborts it past that. True when it ended
/// in time.
async fn finish<E: std::fmt::Display>(
    name: &str,
    task: JoinHandle<Result<(), E>>,
    deadline: tokio::time::Instant,
) -> bool {
    let abort = task.abort_handle();
    match tokio::time::timeout_at(deadline, task).await {
        Ok(Ok(Ok(()))) => true,
        Ok(Ok(Err(e))) => {
            tracing::error!(error = %e, "{name} server ended with an error");
            true
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "{name} server task failed");
            true
        }
        Err(_) => {
            abort.abort();
            false
        }
    }
}

impl Running {
    /// The service being served.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// Stops accepting, lets calls in flight finish (up to the grace period), then
    /// closes the SDK (drains its queue to the brokers or the spool).
    pub async fn shutdown(self) -> ShutdownReport {
        let _ = self.stop.send(true);
        let deadline = tokio::time::Instant::now() + self.grace;
        let grpc = finish("gRPC", self.grpc, deadline).await;
        let http = finish("HTTP", self.http, deadline).await;
        if let Some(s) = self.sweeper {
            // Told to stop with the servers; a pass in progress ends at its next shard.
            let _ = tokio::time::timeout_at(deadline, s).await;
        }
        let drained = grpc && http;
        let report = self.service.sdk().close(self.grace).await;
        ShutdownReport {
            drained,
            left: report.left,
        }
    }
}
