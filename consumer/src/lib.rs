//! The consumer: drains one topic at the rate each downstream can take.
//!
//! Empty until its issue lands (global and per-type limits with fuses, windowed offset
//! commits, requeue under a new partition key, dead letters). The crate exists now so
//! the workspace, lints and CI cover it from the start.
