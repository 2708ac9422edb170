//! The command line's subcommands: each one's arguments (clap `Args`) and the handler
//! that runs it, prints its results and answers the process's exit status.
//!
//! - [`replay`]: `loadtest replay` and `loadtest reconcile`;
//! - [`clean`]: `loadtest clean`;
//! - [`smoke`]: `loadtest smoke`;
//! - [`wallet`]: `loadtest wallet`;
//! - [`bench`]: `loadtest bench`, `loadtest grant-bench` and `loadtest consumer-bench`.

pub mod bench;
pub mod clean;
pub mod replay;
pub mod smoke;
pub mod wallet;
