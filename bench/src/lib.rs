//! The benchmarks and the smoke probes: each measures one part of the pipeline against
//! a baseline run in the same process, back to back, on the local stack, so that the
//! figure is a ratio that the shared machine's drift does not move.
//!
//! - [`send`]: the SDK's `send_reward` against a raw rdkafka producer sending the same
//!   bytes (`reward-bench send`), then its latency when paced;
//! - [`grant`]: the reward service's `GrantBatch` against `redis-benchmark` running
//!   the bare claim script (`reward-bench grant`);
//! - [`consumer`]: the consumer crediting through the service against a bare rdkafka
//!   consumer (`reward-bench consumer`);
//! - [`smoke`]: every server of the stack written and read back through its real
//!   client library (`reward-bench smoke`, and the stack tier's smoke tests);
//! - [`cli`]: the subcommands' arguments and handlers (the binary only parses and
//!   dispatches).
//!
//! The baselines themselves (the bare producer, `redis-benchmark` on the claim
//! script) and the parts started in this process are `reward_baseline`, which the
//! replay's `--ceilings` measures with too. The benches remove their Redis keys once
//! their checks passed (`reward_tools::clean::bench_run`).

// rocketmq-client-rust's push consumer futures nest deeper than the default limit
// when proving `Send`.
#![recursion_limit = "256"]

pub mod audit;
pub mod cli;
pub mod consumer;
pub mod grant;
pub mod metric_cost;
pub mod send;
pub mod smoke;
