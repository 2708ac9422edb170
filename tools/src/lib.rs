//! The operators' tools: what changes a running pipeline and what proves what it did.
//!
//! - [`control`]: `reward-ctl`'s engine: every live knob in one table
//!   ([`control::schema::KNOBS`]), a change checked the way the running instances
//!   will check it, written to the shared dynamic document, audited; budgets and
//!   in-doubt grants.
//! - [`books`]: proof from Redis that every reward sent was credited exactly once,
//!   within budget, with its token stored (`reward-ctl books`, `loadtest reconcile`).
//! - [`clean`]: removing what load-test runs left in Redis, by key family and run
//!   tag (SCAN and UNLINK, cluster-wide).
//! - [`budget_api`]: the service's budget admin API as `reward-ctl budget --service`
//!   calls it.
//!
//! The binary `reward-ctl` (`ops/config`) is the command operators run. `control` and
//! the binary need the services (feature `ctl`, on by default). The stack's address
//! book, topic creation and CPU counters are `reward_stack`.

#[cfg(feature = "ctl")]
pub mod audit;
#[cfg(feature = "ctl")]
pub mod books;
pub mod budget_api;
pub mod clean;
#[cfg(feature = "ctl")]
pub mod control;
