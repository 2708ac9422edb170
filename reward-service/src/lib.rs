//! The reward service: credits each trade number exactly once, within budget.
//!
//! - [`claim`]: the atomic heart of a grant: idempotency record and budget shard,
//!   checked and changed by one Redis script; the exact guarantee is stated there.
//! - [`downstream`]: the trait every crediting system implements; the built-in Redis
//!   ledger and the HTTP downstream; errors classified by code.
//! - [`grant`]: one grant end to end (claim, credit, finish; failure archive and topic).
//! - [`tokens`]: moving a credited reward's token out of the user's pending hash.
//! - [`sweeper`]: compensation from the token store: stored tokens no event credited
//!   within a grace period are granted.
//! - [`service`]: sync, async and batch grants; the wallet's token checks.
//! - [`grpc`], [`http`]: the two APIs; [`server`]: start-up and graceful shutdown;
//!   [`config`]: the TOML configuration and the bearer credential.

pub mod budget_api;
pub mod claim;
pub mod config;
pub mod downstream;
pub mod gauges;
pub mod grant;
pub mod grpc;
pub mod http;
pub mod page;
pub mod server;
pub mod service;
pub mod sweeper;
pub mod tokens;
pub mod trail;
