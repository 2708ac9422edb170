//! `reward-ctl`: the one command operators turn the pipeline's knobs with during an
//! event, validated before anything is written, every change audited.
//!
//! # What it changes
//! - The shared dynamic document (a Redis hash of dotted keys, see
//!   `docs/dynamic-config.md`) that every SDK and consumer instance polls every
//!   500 ms: per-type rate, burst, priority and fuse; the global limit; per-queue
//!   ratio, producers and topic; type → queue routing. Every running instance applies
//!   a change within one poll (the consumer's limiter is swapped at once).
//! - Budgets, which live in Redis already (the claim store's shard caps): a change
//!   reaches every reward service at its next grant.
//!
//! # Validation
//! A change is checked three ways before it is written: the key must be a known knob
//! of [`schema::KNOBS`] (its reward type, queue or producer must exist in the configs
//! the instances run with), the value must be in the knob's range, and the whole resulting document
//! must pass the same checks a running instance makes
//! ([`reward_consumer::limits::LimitsConfig::with_overrides`], [`sdk::check_dynamic`]).
//! A refused change writes nothing and exits non-zero with the reason; without this a
//! bad value would sit in the hash while every instance refused it.
//!
//! # Audit
//! Every change appends a JSON line `{at_unix_ms, who, key, old, new}` to a Redis
//! sorted set beside the document (`<key>:audit`, by time, the last 10 000, so every operator sees the same
//! history: `reward-ctl changes`) and to a local file. `who` is `--who`, else
//! `REWARD_CTL_USER`, `SUDO_USER` or `USER`.

pub mod schema;

use std::collections::BTreeSet;
use std::path::Path;

use fred::prelude::*;
use reward_consumer::limits::LimitsConfig;
use reward_service::claim::{ClaimConfig, Claims};
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

/// One audit record (the change trail's entry).
pub use reward_service::trail::TrailEntry as AuditEntry;

/// The control command's connection and settings.
#[derive(Debug)]
pub struct Control {
    client: Client,
    redis_url: String,
    key: String,
    known: Known,
    audit_file: Option<std::path::PathBuf>,
    who: String,
}

/// Why a command failed: refused (bad input, exit 2) or broken (Redis, files, exit 1).
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The change was refused; nothing was written.
    #[error("refused: {0}")]
    Refused(String),
    /// Something failed underneath.
    #[error("{0}")]
    Failed(String),
}

fn failed(e: impl std::fmt::Display) -> ControlError {
    ControlError::Failed(e.to_string())
}

impl Control {
    /// Connects to Redis.
    pub async fn connect(
        redis_url: &str,
        key: &str,
        known: Known,
        audit_file: Option<std::path::PathBuf>,
        who: String,
    ) -> Result<Self, ControlError> {
        let client = Builder::from_config(Config::from_url(redis_url).map_err(failed)?)
            .build()
            .map_err(failed)?;
        client
            .init()
            .await
            .map_err(|e| failed(format!("Redis at {redis_url}: {e} (ops/stack up?)")))?;
        Ok(Self {
            client,
            redis_url: redis_url.to_string(),
            key: key.to_string(),
            known,
            audit_file,
            who,
        })
    }

    /// Every override in force.
    pub async fn overrides(
        &self,
    ) -> Result<std::collections::BTreeMap<String, String>, ControlError> {
        let m: std::collections::HashMap<String, String> =
            self.client.hgetall(&self.key).await.map_err(failed)?;
        Ok(m.into_iter().collect())
    }

    fn document(
        pairs: &std::collections::BTreeMap<String, String>,
    ) -> Result<toml::Table, ControlError> {
        reward_runtime::dynamic::from_dotted(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(ControlError::Refused)
    }

    /// Sets `key` to `value` after every check; returns the old value.
    pub async fn set(&self, key: &str, value: &str) -> Result<Option<String>, ControlError> {
        self.known
            .check_knob(key, value)
            .map_err(ControlError::Refused)?;
        let mut pairs = self.overrides().await?;
        let old = pairs.insert(key.to_string(), value.to_string());
        self.known
            .check_document(&Self::document(&pairs)?)
            .map_err(ControlError::Refused)?;
        let _: i64 = self
            .client
            .hset(&self.key, (key, value))
            .await
            .map_err(failed)?;
        self.audit(key, old.clone(), Some(value.to_string()))
            .await?;
        Ok(old)
    }

    /// Removes an override (back to the instances' files); returns the old value.
    pub async fn unset(&self, key: &str) -> Result<Option<String>, ControlError> {
        let mut pairs = self.overrides().await?;
        let old = pairs.remove(key);
        if old.is_none() {
            return Ok(None);
        }
        self.known
            .check_document(&Self::document(&pairs)?)
            .map_err(ControlError::Refused)?;
        let _: i64 = self.client.hdel(&self.key, key).await.map_err(failed)?;
        self.audit(key, old.clone(), None).await?;
        Ok(old)
    }

    /// Sets a scene's total budget; refused for an unknown scene or below what it has
    /// spent. Returns (old total, spent).
    pub async fn budget(&self, scene: &str, total: i64) -> Result<(i64, i64), ControlError> {
        if !self.known.scenes.contains(scene) {
            return Err(ControlError::Refused(format!(
                "unknown scene {scene:?} (budgets configured: {})",
                Known::known_list(&self.known.scenes)
            )));
        }
        if total < 0 {
            return Err(ControlError::Refused(format!(
                "budget {total}: must be >= 0"
            )));
        }
        let claims = Claims::connect(&self.redis_url, self.known.claims.clone())
            .await
            .map_err(failed)?;
        let old = claims.budget(scene).await.map_err(failed)?;
        // Exact: the scene's shards are held while their spending is read, and a total
        // below it is refused (`Claims::set_budget`).
        let spent = match claims.set_budget(scene, total).await {
            Err(e @ reward_service::claim::ClaimError::BudgetPartial { .. }) => {
                // Some shards took the new caps: on the record, then told.
                self.audit(
                    &format!("budget:{scene}"),
                    Some(old.to_string()),
                    Some(format!("{total} (partial: {e})")),
                )
                .await?;
                return Err(ControlError::Refused(e.to_string()));
            }
            other => other,
        }
        .map_err(|e| match e {
            e @ (reward_service::claim::ClaimError::BelowSpent { .. }
            | reward_service::claim::ClaimError::BudgetBusy(_)
            | reward_service::claim::ClaimError::Invalid(_)) => {
                ControlError::Refused(e.to_string())
            }
            other => failed(other),
        })?;
        self.audit(
            &format!("budget:{scene}"),
            Some(old.to_string()),
            Some(total.to_string()),
        )
        .await?;
        Ok((old, spent))
    }

    /// Every grant held in doubt (see `reward_service::grant`), oldest first.
    pub async fn in_doubt(&self) -> Result<Vec<reward_service::claim::Doubt>, ControlError> {
        let claims = Claims::connect(&self.redis_url, self.known.claims.clone())
            .await
            .map_err(failed)?;
        claims.in_doubt().await.map_err(failed)
    }

    /// An operator's verdict on an in-doubt grant, after checking the downstream:
    /// `Some(receipt)` records it credited; `None` lets the next delivery credit it.
    /// Refused when the trade number is not in doubt. Audited.
    pub async fn settle(&self, trade_no: &str, receipt: Option<&str>) -> Result<(), ControlError> {
        let claims = Claims::connect(&self.redis_url, self.known.claims.clone())
            .await
            .map_err(failed)?;
        let settled = claims
            .settle_doubt(trade_no, receipt)
            .await
            .map_err(|e| match e {
                e @ reward_service::claim::ClaimError::Invalid(_) => {
                    ControlError::Refused(e.to_string())
                }
                other => failed(other),
            })?;
        if !settled {
            return Err(ControlError::Refused(format!(
                "{trade_no} is not held in doubt (see `reward-ctl in-doubt`)"
            )));
        }
        self.audit(
            &format!("in-doubt:{trade_no}"),
            Some(reward_service::claim::ClaimState::InDoubt.as_str().into()),
            Some(match receipt {
                Some(r) => format!("GRANTED {r}"),
                None => "NOT_CREDITED (to be credited)".into(),
            }),
        )
        .await
    }

    async fn audit(
        &self,
        key: &str,
        old: Option<String>,
        new: Option<String>,
    ) -> Result<(), ControlError> {
        let e = AuditEntry {
            at_unix_ms: reward_runtime::clock::now_ms(),
            who: self.who.clone(),
            key: key.to_string(),
            old,
            new,
        };
        let line = reward_service::trail::record(&self.client, &self.key, &e)
            .await
            .map_err(failed)?;
        if let Some(path) = &self.audit_file {
            use std::io::Write as _;
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(failed)?;
            }
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| failed(format!("audit log {}: {e}", path.display())))?;
            writeln!(f, "{line}").map_err(failed)?;
        }
        Ok(())
    }

    /// The last `n` audit records, newest first.
    pub async fn audit_log(&self, n: i64) -> Result<Vec<AuditEntry>, ControlError> {
        let lines: Vec<String> = self
            .client
            .zrevrange(format!("{}:audit", self.key), 0, n.max(1) - 1, false)
            .await
            .map_err(failed)?;
        Ok(lines
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }
}
