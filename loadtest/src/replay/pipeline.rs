//! The credit side of a run on its own: one reward service on the stand-in ledger and
//! one consumer per broker, for rewards that something other than the load tester
//! sends (the agent's clients, `agent/tests/clients.rs`). The run's setup
//! ([`crate::setup::prepare_run`]) names everything they touch; its books are then
//! checked with [`crate::reconcile`].

use std::time::Duration;

use reward_stack::env::StackEnv;

use super::children::{consumer_spec, service_addr, service_spec, wait_assigned};
use crate::services::Child;
use crate::setup::{self, Broker, Setup};

/// The running service and consumers.
#[derive(Debug)]
pub struct Pipeline {
    service: Child,
    consumers: Vec<Child>,
}

impl Pipeline {
    /// Starts the service (its sweeper's grace `sweeper_grace_ms`), then a Kafka and a
    /// RocketMQ consumer, and waits until the Kafka consumer holds partitions.
    pub async fn start(
        env: &StackEnv,
        setup: &Setup,
        sweeper_grace_ms: u64,
    ) -> anyhow::Result<Self> {
        let config = setup.dir.join("service.toml");
        std::fs::write(
            &config,
            setup::service_toml(env, setup, None, sweeper_grace_ms),
        )?;
        let service = Child::start(
            service_spec(setup, "service", &config),
            Duration::from_secs(60),
        )
        .await?;
        let grpc = format!("http://{}", service_addr(&service));
        let mut consumers = Vec::new();
        for broker in [Broker::Kafka, Broker::Rocketmq] {
            let spec = consumer_spec(setup, env, broker, 0, &grpc, 1)?;
            consumers.push(Child::start(spec, Duration::from_secs(90)).await?);
        }
        wait_assigned(&setup.dir, 1).await?;
        Ok(Self { service, consumers })
    }

    /// The service's HTTP address (host:port): the wallet API, `/metrics`.
    pub fn http_addr(&self) -> String {
        self.service
            .ready
            .split_once("HTTP on ")
            .map(|(_, a)| a.trim().to_string())
            .unwrap_or_default()
    }

    /// Stops the consumers, then the service, each gracefully within `grace`.
    pub async fn stop(self, grace: Duration) {
        for c in self.consumers {
            c.stop(grace).await;
        }
        self.service.stop(grace).await;
    }
}
