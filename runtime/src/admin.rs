//! Operations endpoints for the pipeline's binaries (feature `service`): Prometheus
//! metrics, liveness and readiness over HTTP.
//!
//! | route | answers |
//! | --- | --- |
//! | `GET /metrics` | every metric of the process, Prometheus text format |
//! | `GET /healthz` | 200 while the process serves |
//! | `GET /readyz` | 200 when the binary's own readiness check passes, else 503 with the reason |
//!
//! One process-wide recorder ([`install_metrics`]) collects what the `metrics` macros
//! record anywhere in the process (SDK, consumer, service). Metric names follow
//! `<component>_<noun>_<unit>[_total]` and every one is listed in `docs/metrics.md`.
//! Durations are histograms in seconds with fixed buckets (below), so dashboards can
//! take quantiles over any set of instances with `histogram_quantile`.
//!
//! The endpoints carry no credential: bind them to loopback or an operations network.
//!
//! ```
//! # async fn demo() -> std::io::Result<()> {
//! let handle = reward_runtime::admin::install_metrics().expect("first recorder in this process");
//! let ready: reward_runtime::admin::ReadyCheck = std::sync::Arc::new(|| Box::pin(async { Ok(()) }));
//! let (addr, _server) = reward_runtime::admin::serve("127.0.0.1:0".parse().unwrap(), handle, ready).await?;
//! println!("metrics on http://{addr}/metrics");
//! # Ok(()) }
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
/// The handle `/metrics` renders from (returned by [`install_metrics`]).
pub use metrics_exporter_prometheus::PrometheusHandle;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// Bucket bounds of every `*_seconds` histogram: 100 µs to 60 s, finer around the
/// two SLO targets a burn-rate alert judges by a bucket bound (`send_reward` within
/// 50 ms, end to end within 10 s, 15 s for the overlap profile), so the SLO's own
/// bound is a bucket bound and its neighbours show how far off a miss is.
pub const SECONDS_BUCKETS: [f64; 25] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.04, 0.05, 0.06, 0.075, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 7.5, 10.0, 12.5, 15.0, 20.0, 30.0, 60.0,
];

/// A readiness check: `Ok` when ready, else why not.
pub type ReadyCheck =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// Why the recorder could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the metrics recorder: {0}")]
pub struct InstallError(String);

/// How often the recorder's upkeep folds histogram samples into their buckets.
pub const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Installs the process-wide Prometheus recorder (once per process), with a thread
/// that runs its upkeep every [`UPKEEP_EVERY`].
///
/// The recorder keeps each histogram sample until something folds it into the
/// buckets: a scrape does, and so does the upkeep. Without the upkeep a process
/// nobody scrapes (no Prometheus yet, a scraper down, a benchmark) keeps every
/// sample it ever recorded: 8 bytes per `send_reward`, per grant, per batch, growing
/// for as long as it runs.
pub fn install_metrics() -> Result<PrometheusHandle, InstallError> {
    install_metrics_with_upkeep(UPKEEP_EVERY)
}

/// [`install_metrics`] with the upkeep every `every` (tests use a short one).
pub fn install_metrics_with_upkeep(
    every: std::time::Duration,
) -> Result<PrometheusHandle, InstallError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)
        .map_err(|e| InstallError(e.to_string()))?
        .install_recorder()
        .map_err(|e| InstallError(e.to_string()))?;
    let upkeep = handle.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                upkeep.run_upkeep();
            }
        })
        .map_err(|e| InstallError(format!("the upkeep thread: {e}")))?;
    Ok(handle)
}

#[derive(Clone)]
struct AdminState {
    handle: PrometheusHandle,
    ready: ReadyCheck,
}

/// `/metrics` alone, to merge into a binary's existing router.
pub fn metrics_router<S: Clone + Send + Sync + 'static>(handle: PrometheusHandle) -> Router<S> {
    Router::new().route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            async move { handle.render() }
        }),
    )
}

/// Work a process does before each `/metrics` render: gauges read from a store
/// (budgets, in-doubt grants) are measured when scraped, so the scrape never shows a
/// stale value, and nothing reads the store while nobody scrapes.
pub type Refresh = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// `/metrics` alone, running `refresh` before a render: at most one refresh at a
/// time and one a second (several scrapers cost the store no more than one), waited
/// for at most `within`. A refresh that takes longer goes on in the background and the
/// scrape gets the last values on time, with a warning in the log.
pub fn metrics_router_refreshing<S: Clone + Send + Sync + 'static>(
    handle: PrometheusHandle,
    refresh: Refresh,
    within: std::time::Duration,
) -> Router<S> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let running = Arc::new(AtomicBool::new(false));
    let last = Arc::new(std::sync::Mutex::new(None::<std::time::Instant>));
    Router::new().route(
        "/metrics",
        get(move || {
            let (handle, refresh) = (handle.clone(), refresh.clone());
            let (running, last) = (running.clone(), last.clone());
            async move {
                let due = last
                    .lock()
                    .map(|l| l.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1)))
                    .unwrap_or(true);
                if due && !running.swap(true, Ordering::AcqRel) {
                    let task = tokio::spawn(async move {
                        refresh().await;
                        if let Ok(mut l) = last.lock() {
                            *l = Some(std::time::Instant::now());
                        }
                        running.store(false, Ordering::Release);
                    });
                    if tokio::time::timeout(within, task).await.is_err() {
                        tracing::warn!(
                            waited_ms = within.as_millis() as u64,
                            "gauges read from the store were not refreshed in time; this scrape shows their last values"
                        );
                    }
                }
                handle.render()
            }
        }),
    )
}

/// The three routes.
pub fn router(handle: PrometheusHandle, ready: ReadyCheck) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(AdminState { handle, ready })
}

async fn metrics(State(st): State<AdminState>) -> String {
    st.handle.render()
}

async fn readyz(State(st): State<AdminState>) -> Response {
    match (st.ready)().await {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

/// Serves the three routes on `addr` (port 0: any free port); returns the bound
/// address and the server task.
pub async fn serve(
    addr: SocketAddr,
    handle: PrometheusHandle,
    ready: ReadyCheck,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = router(handle, ready);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the admin endpoint stopped");
        }
    });
    Ok((bound, task))
}
