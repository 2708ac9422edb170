//! The service's gauges read from Redis at each scrape of `/metrics`: the grants in
//! doubt and each configured budget's spent and remaining.

use crate::service::Service;

/// Measures the gauges read from Redis: the in-doubt grants and each configured
/// budget's spent and remaining (of the live budget). A read that fails leaves the
/// gauge at its last value and is logged.
pub async fn refresh_gauges(service: &Service, scenes: &[String]) {
    let claims = service.granter().claims();
    match claims.in_doubt_count().await {
        Ok(n) => metrics::gauge!("reward_service_in_doubt").set(n as f64),
        Err(e) => tracing::warn!(error = %e, "in-doubt gauge: cannot read the count"),
    }
    // Every scene at once: a slow store costs one round of reads, not one per scene.
    let reads = futures_util::future::join_all(scenes.iter().map(|scene| async move {
        (scene, claims.spent(scene).await, claims.budget(scene).await)
    }))
    .await;
    for (scene, spent, total) in reads {
        match (spent, total) {
            (Ok(spent), Ok(total)) => {
                metrics::gauge!("reward_service_budget_spent", "scene" => scene.clone())
                    .set(spent as f64);
                metrics::gauge!("reward_service_budget_remaining", "scene" => scene.clone())
                    .set((total - spent) as f64);
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(scene, error = %e, "budget gauges: cannot read the budget");
            }
        }
    }
}
