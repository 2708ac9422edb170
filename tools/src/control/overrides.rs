//! The dynamic document's overrides: read, set and removed, each change checked as
//! the running instances will check it, then audited.

use fred::prelude::*;

use super::Control;
use super::error::{ControlError, failed};

impl Control {
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
}
