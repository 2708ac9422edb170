//! The load tester: replays peak traffic through the local stack, measures, reconciles.
//!
//! - [`replay`]: a peak profile ([`profile`]) played through the real SDK with
//!   open-model arrivals, the services as child processes ([`services`], configs by
//!   [`setup`]), faults injected ([`faults`], with `reward_standins` playing the downstream and
//!   the SDK hosts), then [`reconcile`] and the
//!   reports ([`report`]), judged on money, service levels and validity ([`slo`]),
//!   with what each credited reward cost in CPU, Redis work and broker records
//!   ([`cost`], the Redis counters it reads: [`redis_counters`]; stage by stage:
//!   [`stages`]);
//! - the command line's handlers, one per subcommand ([`cli`]; the binary only
//!   parses and dispatches); which replay runs a clean takes ([`clean`]).
//!
//! Elsewhere: the bare parts' ceilings a replay's `--ceilings` measures are
//! `reward_baseline`; the stack's address book and topic admin are `reward_stack`; the
//! books and the Redis side of cleaning are `reward_tools`.

// rocketmq-client-rust's push consumer futures nest deeper than the default limit
// when proving `Send`.
#![recursion_limit = "256"]

pub mod clean;
pub mod cli;
pub mod cost;
pub mod faults;
pub mod marks;
pub mod profile;
pub mod reconcile;
pub mod redis_counters;
pub mod replay;
pub mod report;
pub mod services;
pub mod setup;
pub mod slo;
pub mod stages;
