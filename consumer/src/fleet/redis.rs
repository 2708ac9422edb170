//! The fleet's buckets on Redis: the lease script (`lease.lua`), loaded once and run
//! by every instance every lease period.

use fred::prelude::{Client, Pool, Value};
use reward_runtime::script::Script;

use super::config::FleetConfig;
use super::store::{LeaseError, LeaseStore};
use crate::limits::{Ask, Grant, Plan};

/// The lease script (KEYS, ARGV and answer in its header).
const LEASE_LUA: &str = include_str!("lease.lua");

/// The lease script, loaded.
#[derive(Debug, Clone)]
pub struct Leaser {
    script: Script,
    cfg: FleetConfig,
    instance: String,
}

impl Leaser {
    /// Loads the script (on every primary of a cluster).
    pub async fn load(
        client: &Client,
        cfg: FleetConfig,
        instance: String,
    ) -> Result<Self, fred::error::Error> {
        Ok(Leaser {
            script: Script::load(client, LEASE_LUA).await?,
            cfg,
            instance,
        })
    }

    /// Runs one lease.
    pub async fn lease(&self, client: &Client, plan: &Plan) -> Result<Grant, fred::error::Error> {
        let reply: Vec<i64> = self.script.eval(client, || self.call(plan)).await?;
        let bad = || {
            fred::error::Error::new(
                fred::error::ErrorKind::Parse,
                "lease script answered the wrong number of values",
            )
        };
        if reply.len() != plan.types.len() + 2 {
            return Err(bad());
        }
        Ok(Grant {
            live: u32::try_from(reply[0].max(1)).unwrap_or(u32::MAX),
            types: reply[1..=plan.types.len()].to_vec(),
            global: reply[plan.types.len() + 1],
        })
    }

    fn call(&self, plan: &Plan) -> (Vec<String>, Vec<Value>) {
        let mut keys = vec![self.cfg.key("live"), self.cfg.key("g"), self.cfg.key("gd")];
        let mut args: Vec<Value> = vec![
            self.instance.clone().into(),
            Value::from(i64::try_from(self.cfg.live_ttl_ms).unwrap_or(i64::MAX)),
            Value::from(i64::try_from(self.cfg.lease_ms).unwrap_or(i64::MAX)),
            Value::from(plan.types.len() as i64),
        ];
        let bucket = |args: &mut Vec<Value>, a: &Ask| {
            args.push(format!("{:.6}", a.rate).into());
            args.push(format!("{:.6}", a.cap).into());
            args.push(a.give.max(0).into());
            args.push(a.want.max(0).into());
        };
        for a in &plan.types {
            keys.push(self.cfg.key(&format!("t:{}", a.name)));
            bucket(&mut args, a);
        }
        bucket(&mut args, &plan.global);
        args.push(plan.global_used.max(0).into());
        args.push(Value::from(plan.classes.len() as i64));
        for p in &plan.classes {
            args.push(Value::from(i64::from(*p)));
        }
        (keys, args)
    }
}

/// The lease store of a running consumer: the loaded script and the Redis pool it
/// runs on.
#[derive(Debug, Clone)]
pub struct RedisLeases {
    leaser: Leaser,
    pool: Pool,
}

impl RedisLeases {
    /// Leases through `leaser` on `pool`.
    pub fn new(leaser: Leaser, pool: Pool) -> Self {
        RedisLeases { leaser, pool }
    }
}

impl LeaseStore for RedisLeases {
    async fn lease(&self, plan: &Plan) -> Result<Grant, LeaseError> {
        Ok(self.leaser.lease(self.pool.next(), plan).await?)
    }

    async fn leave(&self) {
        let _: Result<i64, _> = fred::interfaces::SortedSetsInterface::zrem(
            self.pool.next(),
            self.leaser.cfg.key("live"),
            self.leaser.instance.clone(),
        )
        .await;
    }
}

/// A unique name for this instance: host, process, and a random part.
pub fn instance_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    format!(
        "{host}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}
