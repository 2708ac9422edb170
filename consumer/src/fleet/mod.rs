#![doc = include_str!("README.md")]

mod config;
#[cfg(test)]
pub(crate) mod memory;
mod redis;
mod run;
mod store;
#[cfg(test)]
mod tests;

pub use config::FleetConfig;
pub use redis::{Leaser, RedisLeases, instance_name};
pub use run::run;
pub use store::{LeaseError, LeaseStore};
