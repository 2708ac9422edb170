//! One Redis node's counters (`INFO commandstats`, `INFO cpu`) read at one moment, and
//! the difference between two readings: what the replay's cost and the stage-by-stage
//! report both divide by the rewards.

use std::collections::BTreeMap;

use serde::Serialize;

use reward_stack::cpu::parse_redis_cpu;

/// One command's counters, summed over the nodes.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CommandCost {
    /// Calls.
    pub calls: u64,
    /// Microseconds.
    pub usec: u64,
}

/// One Redis node's counters at one moment.
#[derive(Debug, Clone, Default)]
pub struct RedisReading {
    pub commands: BTreeMap<String, CommandCost>,
    pub cpu_secs: f64,
}

impl RedisReading {
    /// The counters since `before`; all of them when any fell (the node restarted).
    pub fn since(&self, before: &Self) -> Self {
        let fell = self.cpu_secs < before.cpu_secs
            || self.commands.iter().any(|(k, c)| {
                before
                    .commands
                    .get(k)
                    .is_some_and(|b| c.calls < b.calls || c.usec < b.usec)
            });
        if fell {
            return self.clone();
        }
        let commands = self
            .commands
            .iter()
            .map(|(k, c)| {
                let b = before.commands.get(k).copied().unwrap_or_default();
                (
                    k.clone(),
                    CommandCost {
                        calls: c.calls - b.calls,
                        usec: c.usec - b.usec,
                    },
                )
            })
            .filter(|(_, c)| c.calls > 0)
            .collect();
        Self {
            commands,
            cpu_secs: self.cpu_secs - before.cpu_secs,
        }
    }
}

/// `INFO commandstats` and `INFO cpu` of every primary; empty when Redis does not
/// answer (the report then shows no Redis figures rather than wrong ones).
pub async fn redis_readings(url: &str) -> BTreeMap<String, RedisReading> {
    use fred::interfaces::ClientLike as _;
    let mut out = BTreeMap::new();
    let Ok(builder) = reward_runtime::redis::builder(url, std::time::Duration::from_secs(5)) else {
        return out;
    };
    let Ok(client) = builder.build() else {
        return out;
    };
    if client.init().await.is_err() {
        return out;
    }
    let Ok(nodes) = reward_runtime::keyspace::nodes(&client).await else {
        return out;
    };
    for node in nodes {
        let name = node
            .as_ref()
            .map_or_else(|| "-".to_string(), |s| s.to_string());
        let info = |section: &'static str| {
            reward_runtime::keyspace::on_node::<String>(
                &client,
                node.as_ref(),
                "INFO",
                vec![section],
            )
        };
        let (Ok(cmds), Ok(cpu)) = (info("commandstats").await, info("cpu").await) else {
            continue;
        };
        out.insert(
            name,
            RedisReading {
                commands: parse_commandstats(&cmds),
                cpu_secs: parse_redis_cpu(&cpu),
            },
        );
    }
    let _ = client.quit().await;
    out
}

/// `cmdstat_NAME:calls=N,usec=M,...` lines.
pub(crate) fn parse_commandstats(info: &str) -> BTreeMap<String, CommandCost> {
    let mut out = BTreeMap::new();
    for line in info.lines() {
        let Some((name, fields)) = line
            .trim()
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |k: &str| {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix(k)?.strip_prefix('='))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        out.insert(
            name.to_string(),
            CommandCost {
                calls: field("calls"),
                usec: field("usec"),
            },
        );
    }
    out
}
