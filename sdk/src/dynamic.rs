//! The live routing: the checks a dynamic document passes before it replaces the
//! routing in force, laid over the start-up routing.

use crate::config::{ConfigError, Routing, SdkConfig};

/// The routing a whole dynamic document gives an SDK started with `config`, or why it
/// is refused (inconsistent, or a queue that had no buffer at start-up).
pub(crate) fn routing_of(config: &SdkConfig, doc: &toml::Table) -> Result<Routing, ConfigError> {
    let routing = Routing::from_table(doc, &config.producers, config.limits.max_amount)?;
    let known = &config.routing.queues;
    if let Some(q) = routing.queues.keys().find(|q| !known.contains_key(*q)) {
        return Err(ConfigError::Invalid(format!(
            "queue {q} did not exist at start-up; adding a queue needs a restart"
        )));
    }
    Ok(routing)
}

/// Whether an SDK started with `config` would take `overrides` (the shared dynamic
/// document's changes, as `ops/config` writes them) laid over its start-up routing:
/// the check every running instance makes, for tools that want to refuse a change
/// before writing it. Returns the routing that would result.
///
/// ```
/// let cfg = sdk::config::SdkConfig::from_toml_str(r#"
///     default_queue = "massive"
///     [store]
///     redis_url = "redis://127.0.0.1:16379"
///     [producers.kafka]
///     kind = "kafka"
///     brokers = "127.0.0.1:19092"
///     [queues.massive]
///     topic = "reward-massive"
///     primary = "kafka"
///     backup = "kafka"
///     [types.cash]
/// "#).unwrap();
/// let ok = reward_runtime::dynamic::from_dotted([("queues.massive.ratio", "80")]).unwrap();
/// assert_eq!(sdk::check_dynamic(&cfg, &ok).unwrap().queues["massive"].ratio, 80);
/// let bad = reward_runtime::dynamic::from_dotted([("queues.massive.ratio", "120")]).unwrap();
/// assert!(sdk::check_dynamic(&cfg, &bad).is_err());
/// ```
pub fn check_dynamic(config: &SdkConfig, overrides: &toml::Table) -> Result<Routing, ConfigError> {
    let mut full = routing_table(&config.routing);
    reward_runtime::dynamic::merge(&mut full, overrides);
    routing_of(config, &full)
}

/// The routing as a TOML document (the dynamic sections only).
pub(crate) fn routing_table(r: &Routing) -> toml::Table {
    let mut doc = toml::Table::new();
    let mut queues = toml::Table::new();
    for (name, q) in &r.queues {
        let mut t = toml::Table::new();
        t.insert("topic".into(), q.topic.clone().into());
        t.insert("primary".into(), q.primary.clone().into());
        t.insert("backup".into(), q.backup.clone().into());
        t.insert("ratio".into(), i64::from(q.ratio).into());
        queues.insert(name.clone(), t.into());
    }
    let mut types = toml::Table::new();
    for (name, ty) in &r.types {
        let mut t = toml::Table::new();
        if let Some(q) = &ty.queue {
            t.insert("queue".into(), q.clone().into());
        }
        if let Some(m) = ty.max_amount {
            t.insert("max_amount".into(), m.into());
        }
        types.insert(name.clone(), t.into());
    }
    doc.insert("queues".into(), queues.into());
    doc.insert("types".into(), types.into());
    doc.insert("default_queue".into(), r.default_queue.clone().into());
    doc
}
