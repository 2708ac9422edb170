//! The reward service: credits each trade number exactly once, within budget.
//!
//! Empty until its issue lands (compare-and-set idempotency, sharded budgets, sync and
//! async grant APIs, wallet token endpoints). The crate exists now so the workspace,
//! lints and CI cover it from the start.
