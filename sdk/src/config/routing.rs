//! The routing view of the configuration (queues, reward types, default queue): the
//! part that may change while the process runs, and its checks.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{ConfigError, ProducerConfig, QueueConfig, TypeConfig, invalid};

/// The routing view: what may change at runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing {
    /// Queues by name.
    pub queues: BTreeMap<String, QueueConfig>,
    /// Known reward types.
    pub types: BTreeMap<String, TypeConfig>,
    /// Queue of types that name none.
    pub default_queue: String,
    /// The global amount ceiling (`limits.max_amount`).
    pub max_amount: i64,
}

impl Routing {
    /// The queue name and config of a reward type; `None` for an unknown type.
    pub fn route(&self, reward_type: &str) -> Option<(&str, &QueueConfig)> {
        let t = self.types.get(reward_type)?;
        let name = t.queue.as_deref().unwrap_or(&self.default_queue);
        self.queues
            .get_key_value(name)
            .map(|(k, q)| (k.as_str(), q))
    }

    /// The queue config of a reward type; `None` for an unknown type.
    pub fn queue_for(&self, reward_type: &str) -> Option<&QueueConfig> {
        self.route(reward_type).map(|(_, q)| q)
    }

    /// The largest amount of a known type.
    pub fn max_amount(&self, reward_type: &str) -> Option<i64> {
        let t = self.types.get(reward_type)?;
        Some(t.max_amount.unwrap_or(self.max_amount).min(self.max_amount))
    }

    /// Reads the dynamic sections of a TOML document and checks them against the
    /// producers that exist.
    pub fn from_table(
        doc: &toml::Table,
        producers: &BTreeMap<String, ProducerConfig>,
        max_amount: i64,
    ) -> Result<Self, ConfigError> {
        #[derive(Deserialize)]
        struct View {
            #[serde(default)]
            queues: BTreeMap<String, QueueConfig>,
            #[serde(default)]
            types: BTreeMap<String, TypeConfig>,
            #[serde(default)]
            default_queue: Option<String>,
        }
        let view: View = toml::Value::Table(doc.clone())
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse(e.to_string()))?;
        let default_queue = match view.default_queue {
            Some(q) => q,
            None if view.queues.len() == 1 => {
                view.queues.keys().next().cloned().unwrap_or_default()
            }
            None => {
                return Err(invalid(
                    "default_queue is required when there are several queues",
                ));
            }
        };
        let routing = Routing {
            queues: view.queues,
            types: view.types,
            default_queue,
            max_amount,
        };
        routing.check(producers)?;
        Ok(routing)
    }

    fn check(&self, producers: &BTreeMap<String, ProducerConfig>) -> Result<(), ConfigError> {
        if self.queues.is_empty() {
            return Err(invalid("no [queues] defined"));
        }
        if !self.queues.contains_key(&self.default_queue) {
            return Err(invalid(format!(
                "default_queue {:?} is not a defined queue",
                self.default_queue
            )));
        }
        for (name, q) in &self.queues {
            if name.is_empty() || name.len() > 254 {
                return Err(invalid(format!(
                    "queue name {name:?}: 1..=254 bytes (the spool keeps the name in a byte, 255 marks a keyed record)"
                )));
            }
            if q.ratio > 100 {
                return Err(invalid(format!(
                    "queue {name}: ratio {} is not in 0..=100",
                    q.ratio
                )));
            }
            if q.pack_events == 0 || q.pack_events > proto::pack::MAX_EVENTS {
                return Err(invalid(format!(
                    "queue {name}: pack_events {} is not in 1..={}",
                    q.pack_events,
                    proto::pack::MAX_EVENTS
                )));
            }
            if q.topic.is_empty()
                || !q
                    .topic
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                return Err(invalid(format!(
                    "queue {name}: topic {:?} must be non-empty [A-Za-z0-9._-]",
                    q.topic
                )));
            }
            for p in [&q.primary, &q.backup] {
                if !producers.contains_key(p) {
                    return Err(invalid(format!("queue {name}: no producer named {p:?}")));
                }
            }
        }
        if self.types.is_empty() {
            return Err(invalid(
                "no [types] defined: every reward type must be declared",
            ));
        }
        for (name, t) in &self.types {
            if let Some(q) = &t.queue
                && !self.queues.contains_key(q)
            {
                return Err(invalid(format!("type {name}: no queue named {q:?}")));
            }
            if let Some(m) = t.max_amount
                && m <= 0
            {
                return Err(invalid(format!(
                    "type {name}: max_amount {m} is not positive"
                )));
            }
        }
        Ok(())
    }
}
