//! The bare parts' ceilings every figure of the pipeline is divided by: what a raw
//! rdkafka producer sends on this broker ([`producer`]) and what `redis-benchmark`
//! gets through the claim script on this Redis ([`claim_script`]), measured in the
//! same sitting as the figure they divide, so that the ratio survives the shared
//! machine's drift. The benchmarks (`reward-bench`) and the replay's `--ceilings`
//! (`loadtest replay`) both measure them here.
//!
//! - [`producer`]: the SDK's wire bytes through a bare rdkafka producer;
//! - [`claim_script`]: `redis-benchmark` running the claim script by `EVALSHA`;
//! - [`figures`]: a run's throughput and latency percentiles;
//! - [`parts`]: the pipeline's parts started in this process for a measurement (a
//!   reward service, a consumer) and the signed events they credit, shared by the
//!   benchmarks and the operators' control test;
//! - [`names`]: names no earlier run used.
//!
//! Nothing here removes a run's Redis keys: the caller holds the run's tag live and
//! cleans after it (`reward_tools::clean`).

pub mod claim_script;
pub mod error;
pub mod figures;
pub mod names;
pub mod parts;
pub mod producer;

pub use self::claim_script::{ScriptLoad, ScriptRate, redis_benchmark, script_ceiling};
pub use self::error::RunError;
pub use self::figures::{Percentiles, Throughput};
pub use self::names::unique_name;
pub use self::producer::{raw_ceiling, raw_run};
