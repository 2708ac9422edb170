//! The API's errors: a status, a stable code, a reason, as JSON `{error, reason}`.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::service::ServiceError;

/// An API error: status, stable code, reason.
#[derive(Debug)]
pub struct ApiError {
    pub(super) status: StatusCode,
    pub(super) code: &'static str,
    pub(super) reason: String,
}

impl ApiError {
    pub(super) fn internal(reason: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            reason: reason.into(),
        }
    }

    pub(super) fn unauthorized(code: &'static str, reason: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            code,
            reason: reason.into(),
        }
    }

    pub(super) fn bad(reason: impl Into<String>) -> Self {
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
