//! The `[limits]` settings: per type and global rates, bursts, priorities and fuses,
//! read from the dynamic document and checked before they replace the ones in force.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One reward type's settings.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TypeLimit {
    /// Credits per second (> 0).
    pub rate: f64,
    /// Most credits at once above the rate (>= 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// Higher is served first when the global rate binds.
    #[serde(default)]
    pub priority: u8,
    /// Credit none of this type until unfused.
    #[serde(default)]
    pub fused: bool,
}

/// The `[limits]` section.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Credits per second over all types; 0 = the sum of the type rates (fused types
    /// and the default excluded).
    pub global: f64,
    /// Global burst.
    pub global_burst: u32,
    /// Rate of a type not listed.
    pub default_rate: f64,
    /// Burst of a type not listed.
    pub default_burst: u32,
    /// Listed types.
    pub types: BTreeMap<String, TypeLimit>,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            global: 0.0,
            global_burst: 200,
            default_rate: 1000.0,
            default_burst: 50,
            types: BTreeMap::new(),
        }
    }
}

/// Why a limits document was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("limits: {0}")]
pub struct LimitsError(pub String);

/// Highest rate accepted; far above any downstream, low enough that a typo is caught.
pub(super) const MAX_RATE: f64 = 100_000_000.0;

impl LimitsConfig {
    /// `self` as a dynamic document's `[limits]` section (the base the shared
    /// document's overrides are laid over).
    pub fn as_document(&self) -> toml::Table {
        let mut base = toml::Table::new();
        if let Ok(toml::Value::Table(t)) = toml::Value::try_from(self) {
            base.insert("limits".into(), toml::Value::Table(t));
        }
        base
    }

    /// The limits `overrides` (the shared dynamic document) give a consumer started
    /// with `self`, or why a running consumer would refuse them.
    pub fn with_overrides(&self, overrides: &toml::Table) -> Result<Self, LimitsError> {
        let mut doc = self.as_document();
        reward_runtime::dynamic::merge(&mut doc, overrides);
        Self::from_document(&doc)
    }

    /// Reads the `[limits]` section of a document (absent: the defaults) and checks it.
    pub fn from_document(doc: &toml::Table) -> Result<Self, LimitsError> {
        let cfg: LimitsConfig = match doc.get("limits") {
            None => LimitsConfig::default(),
            Some(v) => v
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| LimitsError(e.to_string()))?,
        };
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> Result<(), LimitsError> {
        let rate = |what: &str, r: f64, zero_ok: bool| {
            if r.is_finite() && (r > 0.0 || (zero_ok && r == 0.0)) && r <= MAX_RATE {
                Ok(())
            } else {
                Err(LimitsError(format!(
                    "{what} = {r}: must be in (0, {MAX_RATE}]{}",
                    if zero_ok { " or 0" } else { "" }
                )))
            }
        };
        rate("global", self.global, true)?;
        rate("default_rate", self.default_rate, false)?;
        for (name, t) in &self.types {
            if name.is_empty() {
                return Err(LimitsError("a type name is empty".into()));
            }
            rate(&format!("types.{name}.rate"), t.rate, false)?;
            if t.burst == Some(0) {
                return Err(LimitsError(format!("types.{name}.burst must be >= 1")));
            }
        }
        if self.global_burst == 0 || self.default_burst == 0 {
            return Err(LimitsError("bursts must be >= 1".into()));
        }
        Ok(())
    }

    /// The global rate in effect: the override, or the sum of the unfused type rates.
    pub fn effective_global(&self) -> f64 {
        if self.global > 0.0 {
            return self.global;
        }
        let sum: f64 = self
            .types
            .values()
            .filter(|t| !t.fused)
            .map(|t| t.rate)
            .sum();
        if sum > 0.0 {
            sum.min(MAX_RATE)
        } else {
            self.default_rate
        }
    }
}
