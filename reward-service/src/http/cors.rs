//! CORS for the configured origins, and the headers every API answer carries.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::HttpState;

/// CORS for the configured origins (see the module docs); every answer of the API
/// also says `nosniff` and `no-store`.
pub(super) async fn cors(State(st): State<Arc<HttpState>>, req: Request, next: Next) -> Response {
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
