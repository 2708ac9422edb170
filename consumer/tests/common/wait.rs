//! Waiting for a condition the test cannot be told about, on the test kit's
//! [`reward_testkit::eventually`].

use std::time::Duration;

/// Waits until `check` holds, polling (a short pause growing to 200 ms); panics with
/// `what` after `secs`.
pub async fn wait_for<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    reward_testkit::eventually(Duration::from_secs(secs), what, async || check().await).await;
}
