//! What the instances run with, read from their config files: the base a change is
//! checked against.

use std::collections::BTreeSet;
use std::path::Path;

use reward_consumer::limits::LimitsConfig;
use reward_service::claim::ClaimConfig;
use sdk::config::SdkConfig;

/// What the instances run with: the base the overrides are checked against.
#[derive(Debug, Clone)]
pub struct Known {
    /// The consumer's `[limits]` from its config file.
    pub limits: LimitsConfig,
    /// The SDK config (queues, producers, routing) of the reward service's `[sdk]`.
    pub sdk: SdkConfig,
    /// Reward types known anywhere.
    pub types: BTreeSet<String>,
    /// `activity/scene` scopes with a configured budget.
    pub scenes: BTreeSet<String>,
    /// The claim store's key prefix and shards (for budgets).
    pub claims: ClaimConfig,
}

fn table_of(path: &Path) -> anyhow::Result<toml::Table> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    text.parse()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

impl Known {
    /// Reads the consumer and reward service config files (no secrets needed).
    pub fn load(consumer: &Path, service: &Path) -> anyhow::Result<Self> {
        let c = table_of(consumer)?;
        let s = table_of(service)?;
        let limits = LimitsConfig::from_document(&c)
            .map_err(|e| anyhow::anyhow!("{}: {e}", consumer.display()))?;
        let sdk_table = s
            .get("sdk")
            .and_then(toml::Value::as_table)
            .ok_or_else(|| anyhow::anyhow!("{}: no [sdk] section", service.display()))?;
        let sdk = SdkConfig::from_table(sdk_table)
            .map_err(|e| anyhow::anyhow!("{} [sdk]: {e}", service.display()))?;
        let mut types: BTreeSet<String> = limits.types.keys().cloned().collect();
        types.extend(sdk.routing.types.keys().cloned());
        if let Some(d) = s.get("downstreams").and_then(toml::Value::as_table) {
            types.extend(d.keys().cloned());
        }
        let scenes = s
            .get("budgets")
            .and_then(toml::Value::as_table)
            .map(|b| b.keys().cloned().collect())
            .unwrap_or_default();
        // The claim store as the service sees it: its file's [claims], then the same
        // REWARD_SERVICE__CLAIMS__* overrides it applies (retention decides how long a
        // settled record lasts, so it must be the service's own).
        let mut claims = ClaimConfig::default();
        let file = s.get("claims").and_then(toml::Value::as_table);
        let setting = |key: &str| -> Option<String> {
            std::env::var(format!(
                "REWARD_SERVICE__CLAIMS__{}",
                key.to_ascii_uppercase()
            ))
            .ok()
            .or_else(|| {
                file.and_then(|t| t.get(key)).map(|v| match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
            })
        };
        let number = |key: &str| -> anyhow::Result<Option<u64>> {
            setting(key)
                .map(|v| {
                    v.parse::<u64>().map_err(|_| {
                        anyhow::anyhow!("{}: claims.{key} {v:?} is not a number", service.display())
                    })
                })
                .transpose()
        };
        if let Some(p) = setting("key_prefix") {
            claims.key_prefix = p;
        }
        if let Some(n) = number("shards")? {
            claims.shards = u32::try_from(n)
                .map_err(|_| anyhow::anyhow!("{}: claims.shards {n}", service.display()))?;
        }
        if let Some(n) = number("lease_ms")? {
            claims.lease_ms = n;
        }
        if let Some(n) = number("retention_secs")? {
            claims.retention_secs = n;
        }
        Ok(Self {
            limits,
            sdk,
            types,
            scenes,
            claims,
        })
    }

    pub(crate) fn known_list(set: impl IntoIterator<Item = impl AsRef<str>>) -> String {
        set.into_iter()
            .map(|s| s.as_ref().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Checks a whole set of overrides as a running consumer and SDK would.
    pub fn check_document(&self, overrides: &toml::Table) -> Result<(), String> {
        self.limits
            .with_overrides(overrides)
            .map_err(|e| format!("a consumer would refuse it: {e}"))?;
        sdk::check_dynamic(&self.sdk, overrides)
            .map_err(|e| format!("an SDK would refuse it: {e}"))?;
        Ok(())
    }
}
