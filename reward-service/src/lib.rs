//! The reward service: credits each trade number exactly once, within budget.
//!
//! Built so far: [`claim`], the atomic heart of a grant (idempotency record and budget
//! shard checked and changed by one Redis script), and [`downstream`], the trait every
//! crediting system implements with the built-in Redis ledger. Still to come (issue
//! 4): the HTTP downstream, the grant flow that ties them together, the gRPC and
//! wallet HTTP APIs, health, graceful shutdown.

pub mod claim;
pub mod downstream;
