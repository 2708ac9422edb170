//! The operators' tools: what changes a running pipeline, and what finds and prepares
//! the brokers it runs on.
//!
//! - [`control`]: `reward-ctl`'s engine: every live knob in one table
//!   ([`control::schema::KNOBS`]), a change checked the way the running instances
//!   will check it, written to the shared dynamic document, audited; budgets and
//!   in-doubt grants.
//! - [`books`]: proof from Redis that every reward sent was credited exactly once,
//!   within budget, with its token stored (`reward-ctl books`, `loadtest reconcile`).
//! - [`clean`]: removing what load-test runs left in Redis, by key family and run
//!   tag (SCAN and UNLINK, cluster-wide).
//! - [`stack`]: where the stack's servers are (`ops/stack env`), a fast reachability
//!   check, Redis fork watching.
//! - [`topics`]: creating Kafka and RocketMQ topics; a Kafka group's committed offsets.
//!
//! The binary `reward-ctl` (`ops/config`) is the command operators run. `control` and
//! the binary need the services (feature `ctl`, on by default); the crates that take
//! only the address book and topic helpers (the tests' kit, the load tester) leave it
//! off.

#[cfg(feature = "ctl")]
pub mod audit;
#[cfg(feature = "ctl")]
pub mod books;
pub mod budget_api;
pub mod clean;
#[cfg(feature = "ctl")]
pub mod control;
pub mod cpu;
pub mod stack;
pub mod topics;
