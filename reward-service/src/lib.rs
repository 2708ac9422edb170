//! The reward service: credits each trade number exactly once, within budget.
//!
//! Built so far: [`claim`], the atomic heart of a grant (idempotency record and budget
//! shard checked and changed by one Redis script); [`downstream`], the trait every
//! crediting system implements, with the built-in Redis ledger; [`grant`], one grant
//! end to end (claim, credit, finish, failure archive). Still to come (issue 4): the
//! HTTP downstream, token deletion after a credit, the failure topic, the gRPC and
//! wallet HTTP APIs, health, graceful shutdown.

pub mod claim;
pub mod downstream;
pub mod grant;
