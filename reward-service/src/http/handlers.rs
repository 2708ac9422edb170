//! One function a route: read and check the request, ask the service, answer JSON.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use proto::v1::GrantOutcome;
use serde::Deserialize;
use serde_json::json;

use super::auth::Caller;
use super::error::ApiError;
use super::state::HttpState;
use super::views::{checked_json, page_json, result_json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TokensBody {
    user_id: String,
    activity_id: String,
    tokens: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeptBody {
    activity_id: String,
    #[serde(default)]
    tokens: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActivityQuery {
    pub(super) activity_id: String,
}

pub(super) fn check_ids(
    st: &HttpState,
    user_id: &str,
    activity_id: &str,
    n: usize,
) -> Result<(), ApiError> {
    // The pipeline's one id rule (`proto::ids`), as the SDK and the grants apply it.
    for (name, v) in [("user_id", user_id), ("activity_id", activity_id)] {
        if let Err(p) = proto::ids::check_id(v, proto::ids::MAX_ID_LEN) {
            return Err(ApiError::bad(format!("{name} {p}")));
        }
    }
    if n > st.max_tokens {
        return Err(ApiError::bad(format!(
            "{n} tokens in one request; at most {} allowed",
            st.max_tokens
        )));
    }
    Ok(())
}

pub(super) async fn validate(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<TokensBody>, JsonRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Json(b) = body?;
    caller.may_act(&b.user_id, &b.activity_id)?;
    check_ids(&st, &b.user_id, &b.activity_id, b.tokens.len())?;
    let mut results = Vec::with_capacity(b.tokens.len());
    for t in &b.tokens {
        let c = st.service.check(&b.user_id, &b.activity_id, t).await?;
        results.push(checked_json(&c));
    }
    Ok(Json(json!({ "results": results })))
}

pub(super) async fn rewards_get(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    Path(user_id): Path<String>,
    q: Result<Query<ActivityQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(q) = q?;
    caller.may_act(&user_id, &q.activity_id)?;
    check_ids(&st, &user_id, &q.activity_id, 0)?;
    let r = st.service.rewards(&user_id, &q.activity_id, &[]).await?;
    Ok(Json(page_json(&user_id, &q.activity_id, &r)))
}

pub(super) async fn rewards_post(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    Path(user_id): Path<String>,
    body: Result<Json<KeptBody>, JsonRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Json(b) = body?;
    caller.may_act(&user_id, &b.activity_id)?;
    check_ids(&st, &user_id, &b.activity_id, b.tokens.len())?;
    let r = st
        .service
        .rewards(&user_id, &b.activity_id, &b.tokens)
        .await?;
    Ok(Json(page_json(&user_id, &b.activity_id, &r)))
}

pub(super) async fn withdraw(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<TokensBody>, JsonRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Json(b) = body?;
    caller.may_act(&b.user_id, &b.activity_id)?;
    check_ids(&st, &b.user_id, &b.activity_id, b.tokens.len())?;
    // Withdrawal grants: like the gRPC handlers, finish them even if the wallet
    // frontend goes away (see crate::grpc, "A caller that goes away").
    let service = st.service.clone();
    let (user_id, activity_id, tokens) =
        (b.user_id.clone(), b.activity_id.clone(), b.tokens.clone());
    let done = tokio::spawn(async move { service.withdraw(&user_id, &activity_id, &tokens).await })
        .await
        .map_err(|e| ApiError::internal(format!("the withdrawal task failed: {e}")))??;
    let results: Vec<_> = done.iter().filter_map(|(_, r)| r.clone()).collect();
    crate::service::count_outcomes("withdraw", &results, &[]);
    let mut credited = 0i64;
    let items: Vec<serde_json::Value> = done
        .iter()
        .map(|(c, r)| {
            let mut v = checked_json(c);
            if let Some(r) = r {
                if r.outcome == GrantOutcome::Granted as i32 {
                    credited += c.token.as_ref().map_or(0, |t| t.amount);
                }
                v["result"] = result_json(r);
            }
            v
        })
        .collect();
    Ok(Json(
        json!({ "items": items, "credited_now_amount": credited }),
    ))
}

pub(super) async fn whoami(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
) -> Json<serde_json::Value> {
    Json(match caller {
        Caller::Backend => json!({
            "caller": "backend",
            "max_tokens": st.max_tokens,
            "max_body_bytes": st.max_body_bytes,
        }),
        Caller::Session(s) => json!({
            "caller": "session",
            "user_id": s.user_id,
            "activity_id": s.activity_id,
            "expires_at_ms": s.expires_at_ms,
            "max_tokens": st.max_tokens,
            "max_body_bytes": st.max_body_bytes,
        }),
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MintBody {
    user_id: String,
    activity_id: String,
    ttl_secs: u64,
}

pub(super) async fn mint(
    State(st): State<Arc<HttpState>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<MintBody>, JsonRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if let Caller::Session(_) = caller {
        return Err(ApiError {
            status: StatusCode::FORBIDDEN,
            code: "forbidden",
            reason: "a session cannot mint sessions".into(),
        });
    }
    let Json(b) = body?;
    let codec = st.sessions.as_ref().ok_or(ApiError {
        status: StatusCode::NOT_IMPLEMENTED,
        code: "sessions_off",
        reason: "this service has no session keys".into(),
    })?;
    let now = u64::try_from(reward_runtime::clock::now_ms()).unwrap_or(0);
    let ttl = std::time::Duration::from_secs(b.ttl_secs);
    let session = codec
        .mint(&b.user_id, &b.activity_id, ttl, now)
        .map_err(|e| ApiError::bad(e.to_string()))?;
    Ok(Json(json!({
        "session": session,
        "expires_at_ms": now.saturating_add(b.ttl_secs.saturating_mul(1000)),
    })))
}

pub(super) async fn healthz() -> &'static str {
    "ok\n"
}

pub(super) async fn readyz(State(st): State<Arc<HttpState>>) -> Response {
    match st.service.ready().await {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            (StatusCode::SERVICE_UNAVAILABLE, "redis is not answering\n").into_response()
        }
    }
}
