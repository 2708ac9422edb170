//! What a replay cost the machine: CPU per process, Redis commands and Redis time,
//! broker records, each per credited reward.
//!
//! # How it is measured
//! A [`Probe`] reads the counters when sending begins and again when every sent
//! amount is spent (every claim made; with an SDK host killed, when the ledger wait
//! ends), before any process stops, and the report divides the differences by the
//! rewards credited. The window leaves out the ledger wait after the budgets: it
//! reads every user's account once a second, the load tester's own checking (a large
//! share of the Redis commands per reward when it is in); what it leaves out of the
//! pipeline is the finish and token move of the credits still in flight at that
//! moment, at most the consumers' batches in flight (a small share of a replay's
//! credits; figures for both: docs/findings/benchmarks-history.md):
//! - **CPU per process**: `utime + stime` of `/proc/PID/stat` for this process (the
//!   activity side: the load tester and the SDK it drives), every child (reward
//!   service instances, consumers) and the stack's servers named by the pid files of
//!   `ops/stack` (`$REWARD_STACK_DIR/run/*.pid`: Redis nodes, Kafka, the RocketMQ
//!   name server and broker), grouped by role. Linux reports these in `USER_HZ`
//!   ticks, 100 per second on every architecture it runs on. A process killed by a
//!   fault takes its CPU with it (its replacement counts from its start), so a drill
//!   under-counts.
//! - **Machine busy CPU**: the `cpu` line of `/proc/stat` (user, nice, system, irq,
//!   softirq, steal), everything the machine did, other tenants included.
//! - **Redis**: `INFO commandstats` and `INFO cpu` of every primary (a single node:
//!   that node): calls and `usec` per command, the server's own CPU. Commands are
//!   every command any part of the pipeline ran (token writes, claims, token moves,
//!   sweeps, fleet leases, delay queue) plus the probe's two `INFO`s per node. The
//!   stand-in wallet's ledger runs on its own Redis (the stack's `WALLET_REDIS_URL`),
//!   read the same way and reported apart: a real wallet's work is not ours. When both
//!   URLs name one server, the wallet's line says so and the pipeline's figure holds
//!   both, and Redis counts the commands a script runs as well as the script call
//!   itself (whose `usec` includes theirs), so the script calls are given apart and
//!   the server's CPU, not the sum of `usec`, is the time figure. Replicas' CPU shows in the process figures (role `redis`), not here. A node
//!   whose counters fell during the run (it restarted, or a failover made it primary)
//!   is counted from its new start.
//! - **Broker records**: records the SDK delivered (a compound record of many events
//!   counts once) plus the events the consumers wrote back (requeues, dead letters;
//!   counted one each, though their SDK packs them too: an upper bound).
//!
//! These are totals over the run window divided by credits, so fixed costs (idle
//! polling, the lease loop) are spread over the rewards; the marginal cost is the
//! difference between two replay lengths (`BENCHMARKS.md`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use reward_stack::cpu::{USER_HZ, machine_busy_ticks, proc_ticks};

pub use crate::redis_counters::CommandCost;
use crate::redis_counters::{RedisReading, redis_readings};
use reward_stack::env::StackEnv;

/// A process to follow: its role in the report and its pid.
pub type Proc = (String, u32);

/// One Redis node's counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeCost {
    /// Commands run.
    pub commands: u64,
    /// Microseconds Redis spent in them (`commandstats` usec).
    pub usec: u64,
    /// The server's CPU seconds (`used_cpu_sys + used_cpu_user`).
    pub cpu_secs: f64,
}

/// Per credited reward.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PerCredited {
    /// Rewards credited (the divisor).
    pub credited: u64,
    /// Machine-wide busy CPU, µs.
    pub machine_cpu_us: f64,
    /// CPU µs by process role.
    pub process_cpu_us: BTreeMap<String, f64>,
    /// Redis commands (all primaries; those run inside scripts included).
    pub redis_commands: f64,
    /// Of them, script calls (`EVALSHA`, `EVAL`): round trips' worth of work.
    pub redis_script_calls: f64,
    /// Redis primaries' CPU, µs.
    pub redis_cpu_us: f64,
    /// The stand-in wallet's Redis: commands (`None`: it shares the pipeline's).
    pub wallet_redis_commands: Option<f64>,
    /// The stand-in wallet's Redis: server CPU, µs.
    pub wallet_redis_cpu_us: Option<f64>,
    /// Broker records.
    pub broker_records: f64,
}

/// A replay's cost: the raw differences and the figures per credited reward.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Cost {
    /// Seconds between the two readings.
    pub secs: f64,
    /// CPUs the machine has.
    pub cores: usize,
    /// Machine busy CPU seconds.
    pub machine_busy_cpu_secs: f64,
    /// CPU seconds by process role.
    pub process_cpu_secs: BTreeMap<String, f64>,
    /// Redis primaries by address (`-` for a single node).
    pub redis_nodes: BTreeMap<String, NodeCost>,
    /// Redis commands by name, summed over the primaries.
    pub redis_commands: BTreeMap<String, CommandCost>,
    /// The stand-in wallet's Redis (`None`: it is the pipeline's, counted there).
    pub wallet_redis: Option<NodeCost>,
    /// Broker records written (SDK deliveries and consumer write-backs).
    pub broker_records: u64,
    /// The figures per credited reward.
    pub per_credited: PerCredited,
    /// Each stage's Redis work per reward, measured alone after the run (`--stages`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<crate::stages::StageCost>,
}

impl Cost {
    /// Fills [`Cost::per_credited`] for `credited` rewards and `broker_records`.
    pub fn divide(&mut self, credited: u64, broker_records: u64) {
        self.broker_records = broker_records;
        let n = credited.max(1) as f64;
        let us = |secs: f64| secs * 1e6 / n;
        let nodes = self.redis_nodes.values();
        self.per_credited = PerCredited {
            credited,
            machine_cpu_us: us(self.machine_busy_cpu_secs),
            process_cpu_us: self
                .process_cpu_secs
                .iter()
                .map(|(k, v)| (k.clone(), us(*v)))
                .collect(),
            redis_commands: nodes.clone().map(|c| c.commands).sum::<u64>() as f64 / n,
            redis_script_calls: self
                .redis_commands
                .iter()
                .filter(|(k, _)| k.starts_with("eval") || k.starts_with("fcall"))
                .map(|(_, c)| c.calls)
                .sum::<u64>() as f64
                / n,
            redis_cpu_us: us(nodes.map(|c| c.cpu_secs).sum()),
            wallet_redis_commands: self.wallet_redis.as_ref().map(|w| w.commands as f64 / n),
            wallet_redis_cpu_us: self.wallet_redis.as_ref().map(|w| us(w.cpu_secs)),
            broker_records: broker_records as f64 / n,
        };
    }

    /// One line per figure, for the terminal.
    pub fn lines(&self) -> Vec<String> {
        let p = &self.per_credited;
        let procs = p
            .process_cpu_us
            .iter()
            .map(|(k, v)| format!("{k} {v:.0}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut top: Vec<_> = self.redis_commands.iter().collect();
        top.sort_by_key(|(_, c)| std::cmp::Reverse(c.calls));
        let top = top
            .iter()
            .take(6)
            .map(|(k, c)| format!("{k} {:.2}", c.calls as f64 / p.credited.max(1) as f64))
            .collect::<Vec<_>>()
            .join(", ");
        let wallet = match (p.wallet_redis_commands, p.wallet_redis_cpu_us) {
            (Some(c), Some(cpu)) => format!(
                "  wallet (stand-in ledger, its own Redis, not counted above): {c:.2} commands, {cpu:.1} us server CPU"
            ),
            _ => "  wallet (stand-in ledger): on the pipeline's Redis, counted above".to_string(),
        };
        let mut stages = Vec::new();
        if !self.stages.is_empty() {
            let sum: f64 = self.stages.iter().map(|s| s.commands).sum();
            stages.push(
                "  pipeline redis by stage, per reward (each stage alone after the run, happy path):"
                    .to_string(),
            );
            stages.extend(crate::stages::lines(&self.stages));
            stages.push(format!(
                "    {:<12} {:>6.2} commands (the run's total less the stages': sweeps, fleet leases, delay queue, retries, takeovers)",
                "rest",
                p.redis_commands - sum
            ));
        }
        let mut lines = vec![
            format!(
                "cost per credited reward ({} credited, {:.1} s, {} cores): machine busy CPU {:.0} us; by process (us): {procs}",
                p.credited, self.secs, self.cores, p.machine_cpu_us
            ),
            format!(
                "  redis: {:.2} commands ({:.2} of them script calls; a script's own commands count too), {:.1} us server CPU over {} primar{}; most called: {top}; broker records {:.2}",
                p.redis_commands,
                p.redis_script_calls,
                p.redis_cpu_us,
                self.redis_nodes.len(),
                if self.redis_nodes.len() == 1 {
                    "y"
                } else {
                    "ies"
                },
                p.broker_records
            ),
            wallet,
        ];
        lines.extend(stages);
        lines
    }
}

/// The counters at the start of the window.
#[derive(Debug)]
pub struct Probe {
    at: Instant,
    machine: Option<u64>,
    procs: BTreeMap<u32, u64>,
    redis: BTreeMap<String, RedisReading>,
    wallet: Option<RedisReading>,
}

impl Probe {
    /// Reads every counter now. `children` are the run's own processes; the stack's
    /// come from its pid files.
    pub async fn start(env: &StackEnv, children: &[Proc]) -> Self {
        let mut procs = BTreeMap::new();
        for (_, pid) in all_procs(children) {
            if let Some(t) = proc_ticks(pid) {
                procs.insert(pid, t);
            }
        }
        Self {
            at: Instant::now(),
            machine: machine_busy_ticks(),
            procs,
            redis: redis_readings(&env.redis_url).await,
            wallet: wallet_reading(env).await,
        }
    }

    /// Reads them again and answers the differences (per credited: [`Cost::divide`]).
    pub async fn finish(&self, env: &StackEnv, children: &[Proc]) -> Cost {
        let mut process_cpu_secs: BTreeMap<String, f64> = BTreeMap::new();
        for (role, pid) in all_procs(children) {
            if let Some(now) = proc_ticks(pid) {
                let before = self.procs.get(&pid).copied().unwrap_or(0);
                *process_cpu_secs.entry(role).or_default() +=
                    now.saturating_sub(before) as f64 / USER_HZ;
            }
        }
        let machine_busy_cpu_secs = match (self.machine, machine_busy_ticks()) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64 / USER_HZ,
            _ => 0.0,
        };
        let wallet_redis = match (&self.wallet, wallet_reading(env).await) {
            (Some(before), Some(now)) => {
                let diff = now.since(before);
                Some(NodeCost {
                    commands: diff.commands.values().map(|c| c.calls).sum(),
                    usec: diff.commands.values().map(|c| c.usec).sum(),
                    cpu_secs: diff.cpu_secs,
                })
            }
            _ => None,
        };
        let after = redis_readings(&env.redis_url).await;
        let mut redis_nodes = BTreeMap::new();
        let mut redis_commands: BTreeMap<String, CommandCost> = BTreeMap::new();
        for (node, now) in after {
            let before = self.redis.get(&node).cloned().unwrap_or_default();
            let diff = now.since(&before);
            let mut cost = NodeCost {
                cpu_secs: diff.cpu_secs,
                ..NodeCost::default()
            };
            for (name, c) in diff.commands {
                cost.commands += c.calls;
                cost.usec += c.usec;
                let sum = redis_commands.entry(name).or_default();
                sum.calls += c.calls;
                sum.usec += c.usec;
            }
            redis_nodes.insert(node, cost);
        }
        Cost {
            secs: self.at.elapsed().as_secs_f64(),
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            machine_busy_cpu_secs,
            process_cpu_secs,
            redis_nodes,
            redis_commands,
            wallet_redis,
            ..Cost::default()
        }
    }
}

/// This process, the children and the stack's servers, by role.
fn all_procs(children: &[Proc]) -> Vec<Proc> {
    let mut all = vec![("load tester + SDK".to_string(), std::process::id())];
    all.extend(children.iter().cloned());
    all.extend(stack_procs(&stack_dir()));
    all
}

fn stack_dir() -> PathBuf {
    std::env::var_os("REWARD_STACK_DIR")
        .map_or_else(|| PathBuf::from("/var/tmp/reward-stack"), PathBuf::from)
}

/// The stack's servers from its pid files, by role.
fn stack_procs(dir: &Path) -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir(dir.join("run")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(stem) = name.strip_suffix(".pid") else {
            continue;
        };
        let Some(pid) = std::fs::read_to_string(e.path())
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
        else {
            continue;
        };
        out.push((stack_role(stem).to_string(), pid));
    }
    out
}

/// The report's role for a stack pid file's stem.
fn stack_role(stem: &str) -> &str {
    match stem {
        "redis" => "redis",
        "wallet" => "wallet redis (stand-in ledger)",
        s if s.starts_with("cluster") => "redis",
        "kafka" => "kafka broker",
        "broker" => "rocketmq broker",
        "namesrv" => "rocketmq name server",
        other => other,
    }
}

/// The wallet's Redis, when it is not the pipeline's (`None` also when it does not
/// answer: the report then says the wallet was not measured apart).
async fn wallet_reading(env: &StackEnv) -> Option<RedisReading> {
    if env.wallet_redis_url == env.redis_url {
        return None;
    }
    let mut all = redis_readings(&env.wallet_redis_url).await;
    let first = all.keys().next().cloned()?;
    all.remove(&first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis_counters::parse_commandstats;

    #[test]
    fn reads_redis_counters() {
        let cmds = parse_commandstats(
            "# Commandstats\r\ncmdstat_evalsha:calls=12,usec=340,usec_per_call=28.3,rejected_calls=0\r\ncmdstat_client|id:calls=1,usec=2\r\n",
        );
        assert_eq!(cmds["evalsha"].calls, 12);
        assert_eq!(cmds["evalsha"].usec, 340);
        assert_eq!(cmds["client|id"].calls, 1);
        assert_eq!(stack_role("cluster3"), "redis");
        assert_eq!(stack_role("kafka"), "kafka broker");
    }

    #[test]
    fn a_node_that_restarted_counts_from_its_new_start() {
        let reading = |calls, cpu| RedisReading {
            commands: BTreeMap::from([("hset".to_string(), CommandCost { calls, usec: calls })]),
            cpu_secs: cpu,
        };
        let d = reading(50, 2.0).since(&reading(20, 1.0));
        assert_eq!(d.commands["hset"].calls, 30);
        assert!((d.cpu_secs - 1.0).abs() < 1e-9);
        let d = reading(5, 0.1).since(&reading(20, 1.0));
        assert_eq!(d.commands["hset"].calls, 5);
    }

    #[test]
    fn divides_by_the_credited() {
        let mut c = Cost {
            machine_busy_cpu_secs: 2.0,
            process_cpu_secs: BTreeMap::from([("redis".to_string(), 0.5)]),
            redis_nodes: BTreeMap::from([(
                "-".to_string(),
                NodeCost {
                    commands: 8_000,
                    usec: 40_000,
                    cpu_secs: 0.25,
                },
            )]),
            redis_commands: BTreeMap::from([
                (
                    "evalsha".to_string(),
                    CommandCost {
                        calls: 2_000,
                        usec: 30_000,
                    },
                ),
                (
                    "eval".to_string(),
                    CommandCost {
                        calls: 500,
                        usec: 9_000,
                    },
                ),
                (
                    "hset".to_string(),
                    CommandCost {
                        calls: 5_500,
                        usec: 1_000,
                    },
                ),
            ]),
            ..Cost::default()
        };
        c.divide(1_000, 1_500);
        let p = &c.per_credited;
        assert!((p.machine_cpu_us - 2_000.0).abs() < 1e-6);
        assert!((p.process_cpu_us["redis"] - 500.0).abs() < 1e-6);
        assert!((p.redis_commands - 8.0).abs() < 1e-9);
        assert!((p.redis_script_calls - 2.5).abs() < 1e-9);
        assert!((p.redis_cpu_us - 250.0).abs() < 1e-6);
        assert!((p.broker_records - 1.5).abs() < 1e-9);
    }
}
