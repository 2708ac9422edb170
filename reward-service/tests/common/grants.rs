//! Grants against the claim store: a store under a fresh prefix, a test grant, and
//! the wait for a grant's hold (a live lease, an in-doubt hold) to end.

use std::time::Duration;

use reward_service::claim::{ClaimConfig, Claims, Grant};
use reward_service::grant::{Granter, Outcome};

use super::redis_url;

/// A claim store under a fresh key prefix.
pub async fn claims(shards: u32, lease_ms: u64) -> Claims {
    let cfg = ClaimConfig {
        key_prefix: format!("claim-test-{:08x}", rand::random::<u32>()),
        shards,
        lease_ms,
        // Test records need not stay 30 days in the stack's Redis.
        retention_secs: 3600,
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

/// The first outcome of granting `g` through `granter` that is not `RetryLater`
/// because of a live lease or hold elsewhere: what a delivery once the hold is over
/// gets. A grant meeting a live hold sends nothing downstream, so asking again while
/// it lasts changes nothing.
pub async fn after_hold(granter: &Granter, g: &Grant) -> Outcome {
    reward_testkit::eventually(
        Duration::from_secs(30),
        &format!("the hold on {} to end", g.trade_no),
        async || match granter.grant(g).await.unwrap() {
            o @ Outcome::RetryLater { code: None, .. } => Err(format!("{o:?}")),
            o => Ok(o),
        },
    )
    .await
}
