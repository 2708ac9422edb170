//! The `[fleet]` section: where the instances of one fleet meet.

use serde::Deserialize;

/// The `[fleet]` section: where the instances of one fleet meet.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FleetConfig {
    /// Hash tag of the fleet's keys (`{prefix}:...`). Every consumer in front of the
    /// same downstreams must use the same one; no braces.
    pub key_prefix: String,
    /// How often an instance leases permits.
    pub lease_ms: u64,
    /// An instance that has not leased for this long no longer counts as live.
    pub live_ttl_ms: u64,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            key_prefix: "rc-fleet".into(),
            lease_ms: 100,
            live_ttl_ms: 2000,
        }
    }
}

impl FleetConfig {
    /// Why the section is unusable, if it is.
    pub fn problem(&self) -> Option<String> {
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Some("fleet.key_prefix must be set, without braces".into());
        }
        if !(10..=5000).contains(&self.lease_ms) {
            return Some("fleet.lease_ms must be in 10..=5000".into());
        }
        if self.live_ttl_ms < 3 * self.lease_ms {
            return Some("fleet.live_ttl_ms must be at least 3 x fleet.lease_ms".into());
        }
        None
    }

    pub(super) fn key(&self, what: &str) -> String {
        format!("{{{}}}:{what}", self.key_prefix)
    }
}
