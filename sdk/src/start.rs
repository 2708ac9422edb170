//! Starting an [`Sdk`]: the builder that connects the token store and the producers,
//! and the watch on the dynamic sources that keeps the routing live
//! ([`crate::dynamic`] checks each document).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use reward_runtime::catalogue::{self, Component};

use crate::config::{self, ConfigError, ProducerConfig, SdkConfig};
use crate::queue::{Engine, Producer};
// Only the broker clients built use the module path.
use crate::dynamic::routing_table;
use crate::error::StartError;
use crate::handle::{Inner, Sdk};
#[cfg(any(feature = "kafka", feature = "rocketmq"))]
use crate::queue;
use crate::store::TokenStore;
use crate::token::{KeyRing, TokenCodec};

/// Builds an [`Sdk`].
#[derive(Debug)]
pub struct SdkBuilder {
    config: SdkConfig,
    keys: Option<KeyRing>,
    producers: BTreeMap<String, Arc<dyn Producer>>,
    watch: bool,
}

impl SdkBuilder {
    /// A builder for `config`: keys and producers as configured, watching on.
    fn new(config: SdkConfig) -> Self {
        SdkBuilder {
            config,
            keys: None,
            producers: BTreeMap::new(),
            watch: true,
        }
    }

    /// Uses this key ring instead of the configured/env one.
    #[must_use]
    pub fn key_ring(mut self, ring: KeyRing) -> Self {
        self.keys = Some(ring);
        self
    }

    /// Uses this producer for the configured name instead of building one.
    #[must_use]
    pub fn producer(mut self, name: &str, producer: Arc<dyn Producer>) -> Self {
        self.producers.insert(name.to_string(), producer);
        self
    }

    /// Whether to watch the dynamic sources (`[dynamic]`); on by default.
    #[must_use]
    pub fn watch(mut self, on: bool) -> Self {
        self.watch = on;
        self
    }

    /// Connects to Redis and the brokers and starts the queue tasks.
    pub async fn start(self) -> Result<Sdk, StartError> {
        let cfg = self.config;
        let ring = match self.keys {
            Some(r) => r,
            None => match &cfg.token.keys_file {
                Some(path) => KeyRing::from_file(path, None)?,
                None => KeyRing::from_env()?,
            },
        };
        let store = TokenStore::connect(cfg.store.clone()).await?;
        // Every metric described and registered at 0, so an alert on an increase
        // sees the first event (reward_runtime::catalogue).
        for c in [Component::Sdk, Component::Redis, Component::Config] {
            catalogue::register(c);
        }
        let producer_names = cfg.producers.keys().map(String::as_str);
        catalogue::zero_counter("reward_sdk_sent_total", "producer", producer_names.clone());
        catalogue::zero_counter("reward_sdk_failovers_total", "from", producer_names);
        catalogue::zero_counter(
            "reward_sdk_backpressure_total",
            "queue",
            cfg.routing.queues.keys().map(String::as_str),
        );
        if cfg.store.write_mode == config::WriteMode::Deferred {
            // Said once at every start, so the choice is never forgotten in a log.
            tracing::warn!(
                "store.write_mode = \"deferred\": send_reward answers before its token is stored; \
                 rewards shown to users are lost if this process dies before its writes land"
            );
        }
        let timeout = Duration::from_millis(cfg.batch.send_timeout_ms);
        let mut producers = self.producers;
        for (name, p) in &cfg.producers {
            if producers.contains_key(name) {
                continue;
            }
            let made: Arc<dyn Producer> = match p {
                #[cfg(feature = "kafka")]
                ProducerConfig::Kafka { brokers, settings } => Arc::new(
                    queue::producer::KafkaProducer::new(name, brokers, settings, timeout)?,
                ),
                #[cfg(feature = "rocketmq")]
                ProducerConfig::Rocketmq { namesrv, group } => {
                    let rt = queue::rocketmq_runtime("reward-sdk-producer").map_err(|reason| {
                        queue::ProduceError {
                            producer: name.clone(),
                            reason,
                        }
                    })?;
                    Arc::new(
                        queue::producer::RocketMqProducer::start(name, rt, namesrv, group, timeout)
                            .await?,
                    )
                }
                // Refused when the config was read; kept for a config built by hand.
                #[allow(unreachable_patterns)]
                other => {
                    return Err(StartError::Config(ConfigError::Invalid(format!(
                        "producer {name}: {}",
                        config::not_built(other).unwrap_or("kind not built")
                    ))));
                }
            };
            producers.insert(name.clone(), made);
        }
        let routing = Arc::new(ArcSwap::from_pointee(cfg.routing.clone()));
        let engine = Engine::start(
            routing.clone(),
            producers,
            cfg.batch.clone(),
            cfg.retry.clone(),
            cfg.spool.clone(),
        )?;
        let inner = Arc::new(Inner {
            codec: TokenCodec::new(ring),
            store,
            engine,
            routing,
            watcher: std::sync::Mutex::new(None),
            config: cfg,
        });
        let sdk = Sdk { inner };
        if self.watch {
            sdk.start_watch();
        }
        Ok(sdk)
    }
}

impl Sdk {
    /// A builder for `config`.
    pub fn builder(config: SdkConfig) -> SdkBuilder {
        SdkBuilder::new(config)
    }

    /// Watches the dynamic sources (`[dynamic]`), if any are set, and applies each
    /// change laid over the start-up routing.
    fn start_watch(&self) {
        let dynamic = &self.inner.config.dynamic;
        if dynamic.file.is_none() && dynamic.redis_key.is_none() {
            return;
        }
        let sources = reward_runtime::dynamic::Sources {
            base: toml::Table::new(),
            file: dynamic.file.clone(),
            redis: dynamic
                .redis_key
                .clone()
                .map(|k| (self.inner.store.pool().clone(), k)),
            poll: Duration::from_millis(dynamic.poll_ms.unwrap_or(500)),
        };
        let me = Arc::downgrade(&self.inner);
        let apply: reward_runtime::dynamic::Apply = Arc::new(move |doc: &toml::Table| {
            let Some(inner) = me.upgrade() else {
                return Ok(());
            };
            // The sources carry changes: lay them over the start-up routing, so a key
            // removed from the sources goes back to its start-up value.
            let mut full = routing_table(&inner.config.routing);
            reward_runtime::dynamic::merge(&mut full, doc);
            Sdk { inner }.apply_config(&full).map_err(|e| e.to_string())
        });
        let handle = sources.watch(vec![apply]);
        if let Ok(mut w) = self.inner.watcher.lock() {
            *w = Some(handle);
        }
    }
}
