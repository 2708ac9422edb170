//! The wallet's HTTP/JSON API (axum).
//!
//! | route | body | answer |
//! | --- | --- | --- |
//! | `POST /v1/tokens/validate` | `{user_id, activity_id, tokens[]}` | `{results: [{validity, token?, credited, creditable, reason?}]}` per token, in order (`creditable`: a withdrawal would credit it now) |
//! | `GET /v1/users/{user_id}/rewards?activity_id=` | - | the wallet page (below) |
//! | `POST /v1/users/{user_id}/rewards` | `{activity_id, tokens[]}` | the page, merged with the tokens the client kept |
//! | `POST /v1/withdraw` | `{user_id, activity_id, tokens[]}` | `{items: [{validity, token?, result?}], credited_now_amount}` |
//! | `GET /v1/session` | - | `{caller: "session", user_id, activity_id, expires_at_ms, max_tokens, max_body_bytes}` (or `{caller: "backend", ...}`): who calls, and the request limits |
//! | `POST /v1/sessions` | `{user_id, activity_id, ttl_secs}` | `{session, expires_at_ms}`: a session minted for a wallet backend (wallet credential only) |
//! | `GET /wallet/` | - | the reference wallet page (`reward-service/wallet/`, see [`crate::page`]) |
//! | `GET /healthz` | - | 200 while the process serves |
//! | `GET /readyz` | - | 200 when Redis answers, else 503 |
//! | `GET /metrics` | - | Prometheus metrics (the binary; see `docs/metrics.md`); needs the metrics credential (`REWARD_METRICS_TOKEN`, else the grant credential), never the wallet's: budgets are not for wallet frontends |
//!
//! The page: `{pending[], credited[], unknown[], illegal, unreadable, expired, expired_trade_nos[],
//! refused, refused_trade_nos[], balance: {type: {pending, credited, total}}}`; `balance`
//! is what the page shows the user per reward type: the credited amount plus what is
//! on its way. Each pending entry carries `sealed`, the token's text, which a
//! withdrawal presents. Nothing that can never be credited is pending: expired
//! tokens are counted in `expired`, tokens over their type's ceiling (or another
//! limit) in `refused`.
//!
//! `validity` is `legal`, `unknown`, `expired` or `illegal` (see [`crate::service`]). The issue's
//! validate body has no `activity_id`, but a token's AEAD binding includes its
//! activity, so it cannot be opened without one: the field is required.
//!
//! # Who may call
//! The wallet routes take either the service-wide wallet credential (a backend: any
//! user) or a **session** ([`sdk::session`]): a short-lived pass a wallet backend mints
//! for one user in one activity, which a browser may hold. A session caller may only
//! name its own user and activity, in the path, the query and the body alike.
//!
//! # CORS
//! Requests from an origin in `wallet.cors_origins` get `Access-Control-Allow-Origin`
//! (that origin, never `*`) and `Vary: Origin`, and their preflights (`OPTIONS`) are
//! answered 204 for `GET`/`POST` with the `authorization` and `content-type` headers.
//! A preflight from any other origin gets 403 `origin_not_allowed`; a plain request
//! from one is served without CORS headers, so the browser keeps the answer from the
//! page that asked. No cookies are involved: the credential is always a header.
//!
//! # Errors
//! Every error is JSON `{error, reason}` with a stable `error` code:
//! 401 `unauthorized` (no bearer credential, or one that is neither the wallet
//! credential nor a session; see `reward_service::config`), 401 `session_expired`,
//! 401 `session_invalid` (edited, signed with a key the service does not hold, lives
//! too long, or sessions are off), 401 `session_other_user` / `session_other_activity`
//! (a session naming a user or activity other than the request's), 403 `forbidden` (a
//! session asking to mint sessions), 501 `sessions_off` (minting without session
//! keys), 413 `too_large` (body over
//! `server.max_body_bytes`), 400 `bad_request` (malformed JSON, missing fields, more
//! than `server.max_tokens_per_request` tokens, empty ids), 503 `unavailable` (Redis
//! failed; nothing was half-done that a retry would repeat wrongly: withdrawals are
//! idempotent per trade number).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use proto::v1::{GrantOutcome, GrantResult, RewardToken, TokenValidity};
use sdk::session::{Session, SessionCodec, SessionError};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::service::{Checked, Rewards, Service, ServiceError};
use reward_runtime::credential::Credential;

/// What the routes share.
#[derive(Debug, Clone)]
pub struct HttpState {
    /// The service.
    pub service: Service,
    /// The wallet credential (the wallet routes).
    pub credential: Credential,
    /// The credential of `/metrics` (the metrics credential, else the grant one).
    pub metrics_credential: Credential,
    /// Most tokens per request.
    pub max_tokens: usize,
    /// Largest request body (bytes); larger get 413.
    pub max_body_bytes: usize,
    /// The session verifier (and minter), when sessions are on.
    pub sessions: Option<SessionCodec>,
    /// Origins answered with CORS headers.
    pub cors_origins: Vec<String>,
}

/// Who is calling a wallet route: put in the request by the credential check.
#[derive(Debug, Clone)]
pub enum Caller {
    /// The wallet credential: a backend acting for any user.
    Backend,
    /// A session: one user in one activity.
    Session(Session),
}

impl Caller {
    /// Whether this caller may act for `user_id` in `activity_id`.
    fn may_act(&self, user_id: &str, activity_id: &str) -> Result<(), ApiError> {
        let Self::Session(s) = self else {
            return Ok(());
        };
        let refused = |code: &'static str, reason: &str| {
            metrics::counter!("reward_service_wallet_refused_total", "code" => code).increment(1);
            Err(ApiError::unauthorized(code, reason))
        };
        if s.user_id != user_id {
            return refused("session_other_user", "this session is for another user");
        }
        if s.activity_id != activity_id {
            return refused(
                "session_other_activity",
                "this session is for another activity",
            );
        }
        Ok(())
    }
}

/// An API error: status, stable code, reason.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    reason: String,
}

impl ApiError {
    fn internal(reason: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            reason: reason.into(),
        }
    }

    fn unauthorized(code: &'static str, reason: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            code,
            reason: reason.into(),
        }
    }

    fn bad(reason: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            code: "bad_request",
            reason: reason.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({"error": self.code, "reason": self.reason}));
        (self.status, body).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return Self {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                code: "too_large",
                reason: r.body_text(),
            };
        }
        Self::bad(r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        Self::bad(r.body_text())
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::Invalid(why) => Self::bad(why),
            ServiceError::Store(why) => {
                tracing::warn!(error = %why, "wallet call failed in the store");
                Self {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    code: "unavailable",
                    reason: "the token store did not answer; try again".into(),
                }
            }
        }
    }
}

/// A token as the wallet sees it.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct TokenView {
    trade_no: String,
    activity_id: String,
    scene_id: String,
    reward_type: String,
    amount: i64,
    description: String,
    grant_time_ms: i64,
    expires_at_ms: i64,
}

impl From<&RewardToken> for TokenView {
    fn from(t: &RewardToken) -> Self {
        Self {
            trade_no: t.trade_no.clone(),
            activity_id: t.activity_id.clone(),
            scene_id: t.scene_id.clone(),
            reward_type: t.reward_type.clone(),
            amount: t.amount,
            description: t.description.clone(),
            grant_time_ms: t.grant_time_ms,
            expires_at_ms: t.expires_at_ms,
        }
    }
}

fn validity(v: TokenValidity) -> &'static str {
    match v {
        TokenValidity::Legal => "legal",
        TokenValidity::Unknown => "unknown",
        TokenValidity::Expired => "expired",
        _ => "illegal",
    }
}

fn outcome(o: i32) -> &'static str {
    match GrantOutcome::try_from(o).unwrap_or(GrantOutcome::Unspecified) {
        GrantOutcome::Granted => "granted",
        GrantOutcome::Accepted => "accepted",
        GrantOutcome::Duplicate => "duplicate",
        GrantOutcome::Conflict => "conflict",
        GrantOutcome::RetryLater => "retry_later",
        GrantOutcome::BudgetExhausted => "budget_exhausted",
        GrantOutcome::FailedRetryable => "failed_retryable",
        GrantOutcome::FailedPermanent => "failed_permanent",
        GrantOutcome::Invalid => "invalid",
        GrantOutcome::InDoubt => "in_doubt",
        GrantOutcome::Unspecified => "unspecified",
    }
}

fn result_json(r: &GrantResult) -> serde_json::Value {
    json!({
        "trade_no": r.trade_no,
        "outcome": outcome(r.outcome),
        "downstream_ref": r.downstream_ref,
        "error_code": r.error_code,
        "message": r.message,
        "retry_after_ms": r.retry_after_ms,
    })
}

fn checked_json(c: &Checked) -> serde_json::Value {
    let mut v = json!({
        "validity": validity(c.validity),
        "credited": c.credited,
        "creditable": c.creditable,
    });
    if let Some(t) = &c.token {
        v["token"] = json!(TokenView::from(t));
    }
    if let Some(r) = &c.reason {
        v["reason"] = json!(r);
    }
    v
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensBody {
    user_id: String,
    activity_id: String,
    tokens: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeptBody {
    activity_id: String,
    #[serde(default)]
    tokens: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActivityQuery {
    activity_id: String,
}

fn check_ids(st: &HttpState, user_id: &str, activity_id: &str, n: usize) -> Result<(), ApiError> {
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

async fn validate(
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

fn page_json(user_id: &str, activity_id: &str, r: &Rewards) -> serde_json::Value {
    let views = |ts: &[RewardToken]| ts.iter().map(TokenView::from).collect::<Vec<_>>();
    let balance: BTreeMap<&str, serde_json::Value> = r
        .balance
        .iter()
        .map(|(ty, (p, c))| {
            (
                ty.as_str(),
                json!({"pending": p, "credited": c, "total": p.saturating_add(*c)}),
            )
        })
        .collect();
    json!({
        "user_id": user_id,
        "activity_id": activity_id,
        "pending": r.pending.iter().map(|t| {
            let mut v = json!(TokenView::from(t));
            if let Some(sealed) = r.sealed.get(&t.trade_no) {
                v["sealed"] = json!(sealed);
            }
            v
        }).collect::<Vec<_>>(),
        "credited": views(&r.credited),
        "unknown": views(&r.unknown),
        "illegal": r.illegal,
        "unreadable": r.unreadable,
        "expired": r.expired,
        "expired_trade_nos": r.expired_trade_nos,
        "refused": r.refused,
        "refused_trade_nos": r.refused_trade_nos,
        "balance": balance,
    })
}

async fn rewards_get(
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

async fn rewards_post(
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

async fn withdraw(
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
    crate::service::count_outcomes("withdraw", &results);
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

async fn whoami(
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
struct MintBody {
    user_id: String,
    activity_id: String,
    ttl_secs: u64,
}

async fn mint(
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

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(st): State<Arc<HttpState>>) -> Response {
    match st.service.ready().await {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            (StatusCode::SERVICE_UNAVAILABLE, "redis is not answering\n").into_response()
        }
    }
}

/// The bearer token of an `Authorization` header, if it has one.
pub fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let v = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = v.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then_some(rest)
}

/// The wallet routes' check: the wallet credential (a backend) or a session.
async fn auth(State(st): State<Arc<HttpState>>, mut req: Request, next: Next) -> Response {
    let caller = match caller_of(&st, req.headers()) {
        Ok(c) => c,
        Err(e) => {
            metrics::counter!("reward_service_wallet_refused_total", "code" => e.code).increment(1);
            return e.into_response();
        }
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

fn caller_of(st: &HttpState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let missing = || {
        ApiError::unauthorized(
            "unauthorized",
            "a valid `Authorization: Bearer <credential or session>` header is required",
        )
    };
    let presented = bearer(headers).ok_or_else(missing)?;
    if st.credential.matches(presented) {
        return Ok(Caller::Backend);
    }
    let text = std::str::from_utf8(presented).map_err(|_| missing())?;
    if !text.starts_with(sdk::session::PREFIX) {
        return Err(missing());
    }
    let codec = st.sessions.as_ref().ok_or_else(|| {
        ApiError::unauthorized("session_invalid", "this service does not accept sessions")
    })?;
    let now = u64::try_from(reward_runtime::clock::now_ms()).unwrap_or(0);
    match codec.verify(text, now) {
        Ok(s) => Ok(Caller::Session(s)),
        Err(e @ SessionError::Expired { .. }) => {
            Err(ApiError::unauthorized("session_expired", e.to_string()))
        }
        Err(e) => Err(ApiError::unauthorized("session_invalid", e.to_string())),
    }
}

/// CORS for the configured origins (see the module docs); every answer of the API
/// also says `nosniff` and `no-store`.
async fn cors(State(st): State<Arc<HttpState>>, req: Request, next: Next) -> Response {
    let origin = req.headers().get(header::ORIGIN).cloned();
    let allowed = origin
        .as_ref()
        .filter(|o| st.cors_origins.iter().any(|a| a.as_bytes() == o.as_bytes()));
    let preflight = req.method() == axum::http::Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut resp = match (preflight, allowed) {
        (true, None) => ApiError {
            status: StatusCode::FORBIDDEN,
            code: "origin_not_allowed",
            reason: "this origin may not call the wallet API".into(),
        }
        .into_response(),
        (true, Some(_)) => {
            let mut r = StatusCode::NO_CONTENT.into_response();
            let h = r.headers_mut();
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                header::HeaderValue::from_static("GET, POST"),
            );
            h.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                header::HeaderValue::from_static("authorization, content-type"),
            );
            h.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                header::HeaderValue::from_static("600"),
            );
            r
        }
        (false, _) => next.run(req).await,
    };
    let h = resp.headers_mut();
    h.append(header::VARY, header::HeaderValue::from_static("origin"));
    // JSON about a user's money: never sniffed as something else, never cached.
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    if let Some(o) = allowed {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o.clone());
    }
    resp
}

async fn metrics_auth(State(st): State<Arc<HttpState>>, req: Request, next: Next) -> Response {
    check(&st.metrics_credential, req, next).await
}

async fn check(credential: &Credential, req: Request, next: Next) -> Response {
    match bearer(req.headers()) {
        Some(t) if credential.matches(t) => next.run(req).await,
        _ => ApiError::unauthorized(
            "unauthorized",
            "a valid `Authorization: Bearer <credential>` header is required",
        )
        .into_response(),
    }
}

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
            reward_runtime::admin::metrics_router(h)
                .route_layer(middleware::from_fn_with_state(st.clone(), metrics_auth))
        }))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(st)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn parse_all(bytes: &[u8]) {
        let _ = serde_json::from_slice::<TokensBody>(bytes);
        let _ = serde_json::from_slice::<KeptBody>(bytes);
        let _ = serde_json::from_slice::<MintBody>(bytes);
        if let Ok(text) = std::str::from_utf8(bytes) {
            let _ = serde_urlencoded_like(text);
        }
    }

    /// The query string as axum's `Query` reads it (form-urlencoded pairs).
    fn serde_urlencoded_like(text: &str) -> Option<String> {
        let q: Result<axum::extract::Query<ActivityQuery>, _> =
            axum::extract::Query::try_from_uri(&format!("/x?{text}").parse().ok()?);
        q.ok().map(|q| q.0.activity_id)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: proto::edits::cases(), failure_persistence: None, ..ProptestConfig::default() })]

        /// Any body bytes: parsed or refused, never a panic.
        #[test]
        fn wallet_bodies_take_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            parse_all(&bytes);
        }

        /// Edits of a valid body (the parser's deeper paths): parsed or refused.
        #[test]
        fn wallet_bodies_take_edited_json(
            edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..8),
        ) {
            let mut b = br#"{"user_id":"u1","activity_id":"cny","tokens":["AAAA","BBBB"]}"#.to_vec();
            proto::edits::apply(&mut b, &edits);
            parse_all(&b);
        }
    }
}
