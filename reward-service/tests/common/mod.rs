//! Shared set-up for the reward service's tests against the local stack's Redis.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use reward_service::claim::{ClaimConfig, Claims, Grant};

/// The stack's Redis URL; panics (never skips) if Redis is down.
pub fn redis_url() -> String {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:16379".into());
    let addr = url.trim_start_matches("redis://").to_string();
    assert!(
        std::net::TcpStream::connect(&addr).is_ok(),
        "Redis at {addr} is not answering; start the local stack with `ops/stack up`"
    );
    url
}

/// A claim store under a fresh key prefix.
pub async fn claims(shards: u32, lease_ms: u64) -> Claims {
    let cfg = ClaimConfig {
        key_prefix: format!("claim-test-{:08x}", rand::random::<u32>()),
        shards,
        lease_ms,
        ..ClaimConfig::default()
    };
    Claims::connect(&redis_url(), cfg).await.unwrap()
}

/// A cash grant of `amount` to user u1 in scene "rain".
pub fn grant(trade_no: &str, amount: i64) -> Grant {
    Grant {
        scene: "rain".into(),
        activity_id: "cny".into(),
        trade_no: trade_no.into(),
        user_id: "u1".into(),
        reward_type: "cash".into(),
        amount,
    }
}
