//! Who may call: the wallet credential (a backend, any user) or a session (one user in
//! one activity), checked on every wallet route; the metrics credential on `/metrics`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use reward_runtime::credential::Credential;
use sdk::session::{Session, SessionError};

use super::error::ApiError;
use super::state::HttpState;

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
    pub(super) fn may_act(&self, user_id: &str, activity_id: &str) -> Result<(), ApiError> {
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

/// The bearer token of an `Authorization` header, if it has one.
pub fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let v = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = v.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then_some(rest)
}

/// The wallet routes' check: the wallet credential (a backend) or a session.
pub(super) async fn auth(
    State(st): State<Arc<HttpState>>,
    mut req: Request,
    next: Next,
) -> Response {
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

pub(super) fn caller_of(st: &HttpState, headers: &HeaderMap) -> Result<Caller, ApiError> {
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

pub(super) async fn metrics_auth(
    State(st): State<Arc<HttpState>>,
    req: Request,
    next: Next,
) -> Response {
    check(&st.metrics_credential, req, next).await
}

pub(super) async fn check(credential: &Credential, req: Request, next: Next) -> Response {
    match bearer(req.headers()) {
        Some(t) if credential.matches(t) => next.run(req).await,
        _ => ApiError::unauthorized(
            "unauthorized",
            "a valid `Authorization: Bearer <credential>` header is required",
        )
        .into_response(),
    }
}
