#![doc = include_str!("README.md")]

pub mod config;
mod lease;
mod live;
mod metrics;
pub mod plan;
mod pool;
#[cfg(test)]
mod tests;

pub use self::config::{LimitsConfig, LimitsError, TypeLimit};
pub use self::live::{Limits, Verdict};
pub use self::plan::{Ask, Grant, Plan};
