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
                    "slow" => {
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
    assert!(ErrorCode::Timeout.retryable() && ErrorCode::RateLimited.retryable());
    assert!(!ErrorCode::AccountClosed.retryable() && !ErrorCode::Invalid.retryable());

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 7);
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
    assert!(Http::new("ftp://example/credit", Duration::from_secs(1)).is_err());
    assert!(Http::new("not a url", Duration::from_secs(1)).is_err());
}
