//! The limits in effect as gauges.

use super::config::LimitsConfig;

/// The limits in effect as gauges, so a dashboard can draw each type's delivered
/// rate against its limit: `reward_consumer_rate_limit_per_second{type}` (0 while
/// fused), `reward_consumer_fused{type}`, `reward_consumer_global_limit_per_second`.
pub(super) fn export(config: &LimitsConfig, global_rate: f64) {
    metrics::gauge!("reward_consumer_global_limit_per_second").set(global_rate);
    for (t, l) in &config.types {
        let rate = if l.fused { 0.0 } else { l.rate };
        metrics::gauge!("reward_consumer_rate_limit_per_second", "type" => t.clone()).set(rate);
        metrics::gauge!("reward_consumer_fused", "type" => t.clone()).set(if l.fused {
            1.0
        } else {
            0.0
        });
    }
}
