//! The router: which route goes to which handler, behind which check.

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};

use super::auth::{auth, metrics_auth};
use super::cors::cors;
use super::handlers::{
    healthz, mint, readyz, rewards_get, rewards_post, validate, whoami, withdraw,
};
use super::state::HttpState;

/// The router: the wallet routes behind the bearer check, health routes (and
/// `/metrics` when the process has a recorder) open.
pub fn router(
    state: HttpState,
    max_body_bytes: usize,
    metrics: Option<reward_runtime::admin::PrometheusHandle>,
) -> Router {
    let st = Arc::new(state);
    let api = Router::new()
        .route("/v1/tokens/validate", post(validate))
        .route(
            "/v1/users/{user_id}/rewards",
            get(rewards_get).post(rewards_post),
        )
        .route("/v1/withdraw", post(withdraw))
        .route("/v1/session", get(whoami))
        .route("/v1/sessions", post(mint))
        .route_layer(middleware::from_fn_with_state(st.clone(), auth))
        .layer(middleware::from_fn_with_state(st.clone(), cors));
    Router::new()
        .merge(api)
        .merge(crate::page::router())
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(metrics.map_or_else(Router::new, |h| {
            let gauges = st.clone();
            let refresh: reward_runtime::admin::Refresh = Arc::new(move || {
                let st = gauges.clone();
                Box::pin(async move {
                    crate::gauges::refresh_gauges(&st.service, &st.budget_scenes).await;
                })
            });
            reward_runtime::admin::metrics_router_refreshing(
                h,
                refresh,
                std::time::Duration::from_secs(1),
            )
            .route_layer(middleware::from_fn_with_state(st.clone(), metrics_auth))
        }))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(st)
}
