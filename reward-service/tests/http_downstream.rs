//! The HTTP downstream against a real local HTTP server: answers classified by status
//! and code (never by text), the trade number sent as the idempotency key, timeouts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use reward_service::downstream::{Credit, Downstream, ErrorCode, Http};
use serde_json::{Value, json};

type Seen = Arc<Mutex<Vec<(String, Value)>>>;

async fn serve(seen: Seen) -> String {
    let app = axum::Router::new().route(
        "/credit",
        post(move |headers: HeaderMap, Json(body): Json<Value>| {
            let seen = seen.clone();
            async move {
                let key = headers
                    .get("idempotency-key")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                seen.lock().unwrap().push((key, body.clone()));
                match body["user_id"].as_str().unwrap_or_default() {
                    "ok" => (StatusCode::OK, Json(json!({"ref": "tx-1"}))).into_response(),
                    "plain" => (StatusCode::CREATED, "done").into_response(),
                    "limited" => (StatusCode::TOO_MANY_REQUESTS, "slow down").into_response(),
                    "boom" => (StatusCode::SERVICE_UNAVAILABLE, "ACCOUNT_CLOSED").into_response(),
                    "closed" => (
                        StatusCode::CONFLICT,
                        Json(json!({"code": "ACCOUNT_CLOSED", "message": "gone"})),
                    )
                        .into_response(),
                    "gone" => (StatusCode::NOT_FOUND, "no such route").into_response(),
                    "moved" => (
                        StatusCode::FOUND,
                        [("location", "http://127.0.0.1:9/elsewhere")],
                    )
                        .into_response(),
                    "inuse" => {
                        (StatusCode::CONFLICT, Json(json!({"code": "KEY_IN_USE"}))).into_response()
                    }
                    "refused" => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        Json(json!({"code": "NOT_CREDITED"})),
                    )
                        .into_response(),
                    "slow" => {
                        // Time is the subject: an answer later than the caller's timeout.
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        (StatusCode::OK, "late").into_response()
                    }
                    _ => (StatusCode::UNPROCESSABLE_ENTITY, "timeout").into_response(),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/credit")
}

fn credit(user: &str) -> Credit {
    Credit {
        trade_no: format!("t-{user}"),
        user_id: user.into(),
        reward_type: "coupon".into(),
        amount: 3,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_classified_by_status_and_code() {
    let seen: Seen = Arc::default();
    let url = serve(seen.clone()).await;
    let h = Http::new(&url, Duration::from_millis(500)).unwrap();

    assert_eq!(h.credit(&credit("ok")).await.unwrap(), "tx-1");
    assert_eq!(h.credit(&credit("plain")).await.unwrap(), "t-plain");
    let code = |user: &'static str| {
        let h = h.clone();
        async move { h.credit(&credit(user)).await.unwrap_err().code }
    };
    assert_eq!(code("limited").await, ErrorCode::RateLimited);
    // The body says ACCOUNT_CLOSED as text; only a 4xx's `code` field counts.
    assert_eq!(code("boom").await, ErrorCode::Unavailable);
    assert_eq!(code("closed").await, ErrorCode::AccountClosed);
    assert_eq!(code("other").await, ErrorCode::Invalid);
    assert_eq!(code("slow").await, ErrorCode::Timeout);
    assert_eq!(code("inuse").await, ErrorCode::KeyInUse);
    assert_eq!(code("refused").await, ErrorCode::Unavailable);
    assert!(ErrorCode::Timeout.retryable() && ErrorCode::RateLimited.retryable());
    assert!(ErrorCode::KeyInUse.retryable());
    assert!(!ErrorCode::AccountClosed.retryable() && !ErrorCode::Invalid.retryable());

    // In doubt: every answer that leaves the credit's outcome unknown. Never "not
    // credited" for a timeout, a reset or a bare 5xx.
    let doubt = |user: &'static str| {
        let h = h.clone();
        async move { h.credit(&credit(user)).await.unwrap_err().in_doubt }
    };
    // A wrong route is the configuration's fault: retried, never failed. A redirect is
    // not followed, and may come after a credit: in doubt.
    assert_eq!(code("gone").await, ErrorCode::Unavailable);
    assert_eq!(code("moved").await, ErrorCode::Unavailable);
    for (user, want) in [
        ("gone", false),
        ("moved", true),
        ("slow", true),
        ("boom", true),
        ("inuse", true),
        ("refused", false),
        ("limited", false),
        ("closed", false),
        ("other", false),
    ] {
        assert_eq!(doubt(user).await, want, "{user}");
    }

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 20, "a redirect is not followed");
    for (key, body) in &seen {
        assert_eq!(key, body["trade_no"].as_str().unwrap(), "idempotency key");
        assert_eq!(body["amount"], 3);
        assert_eq!(body["reward_type"], "coupon");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_is_unavailable_and_bad_urls_are_refused() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let h = Http::new(&format!("http://{addr}/credit"), Duration::from_millis(500)).unwrap();
    let e = h.credit(&credit("ok")).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unavailable, "{e}");
    assert!(!e.in_doubt, "nothing was sent: {e}");
    assert!(Http::new("ftp://example/credit", Duration::from_secs(1)).is_err());
    assert!(Http::new("not a url", Duration::from_secs(1)).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_a_downstream_url_is_never_shown() {
    let seen: Seen = Arc::default();
    let url = serve(seen).await;
    let secret_url = url.replace("http://", "http://wallet:s3cr3t-pw@");
    let h = Http::new(&secret_url, Duration::from_millis(300)).unwrap();
    for user in ["boom", "slow", "other"] {
        let e = h.credit(&credit(user)).await.unwrap_err();
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains("s3cr3t-pw"), "{shown}");
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let h = Http::new(
        &format!("http://wallet:s3cr3t-pw@{addr}/credit"),
        Duration::from_millis(300),
    )
    .unwrap();
    let e = h.credit(&credit("ok")).await.unwrap_err();
    assert!(!format!("{e} {e:?}").contains("s3cr3t-pw"), "{e}");
    let e = Http::new(
        "ftp://wallet:s3cr3t-pw@example/credit",
        Duration::from_secs(1),
    )
    .unwrap_err();
    assert!(!e.contains("s3cr3t-pw"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_route_answers_credited_not_credited_or_doubt() {
    use axum::extract::Query;
    use reward_service::downstream::{CreditStatus, HttpOptions};
    let app = axum::Router::new().route(
        "/status",
        axum::routing::get(
            |Query(q): Query<std::collections::HashMap<String, String>>| async move {
                match q.get("user_id").map(String::as_str) {
                    Some("ok") => (
                        StatusCode::OK,
                        Json(json!({"state": "CREDITED", "ref": "tx-9"})),
                    )
                        .into_response(),
                    Some("no") => {
                        (StatusCode::OK, Json(json!({"state": "NOT_CREDITED"}))).into_response()
                    }
                    _ => (StatusCode::NOT_FOUND, "no such route").into_response(),
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let h = Http::with_options(
        &format!("http://{addr}/credit"),
        &HttpOptions {
            timeout: Duration::from_millis(500),
            honours_key: false,
            status_url: Some(format!("http://{addr}/status")),
        },
    )
    .unwrap();
    let contract = h.contract();
    assert!(contract.status && !contract.honours_key && contract.resolvable());
    assert_eq!(
        h.status(&credit("ok")).await.unwrap(),
        CreditStatus::Credited("tx-9".into())
    );
    assert_eq!(
        h.status(&credit("no")).await.unwrap(),
        CreditStatus::NotCredited
    );
    // A 404 may be a wrong route: never read as "not credited".
    assert!(h.status(&credit("x")).await.unwrap_err().in_doubt);
}
