//! The reward service: credits each trade number exactly once, within budget.
//!
//! Built so far: [`claim`], the atomic heart of a grant (idempotency record and budget
//! shard checked and changed by one Redis script). Still to come (issue 4): the
//! downstream trait and its ledger/HTTP implementations, the gRPC and wallet HTTP APIs,
//! health, graceful shutdown.

pub mod claim;
