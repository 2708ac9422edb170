//! The load tester: replays peak traffic through the local stack, measures, reconciles.
//!
//! At this stage it holds the stack's address book ([`stack`]) and the smoke probes
//! ([`smoke`]) that prove each real server works; the replay, reconciliation and
//! reports come with the later issues.

// rocketmq-client-rust's push consumer futures nest deeper than the default limit
// when proving `Send`.
#![recursion_limit = "256"]

pub mod bench;
pub mod consumer_bench;
pub mod faults;
pub mod grant_bench;
pub mod profile;
pub mod reconcile;
pub mod replay;
pub mod report;
pub mod services;
pub mod setup;
pub mod smoke;
pub mod stack;
