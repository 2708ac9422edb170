//! The command line's subcommands: each one's arguments (clap `Args`) and the handler
//! that runs it, prints its results and answers the process's exit status.
//!
//! - [`replay`]: `loadtest replay` and `loadtest reconcile`;
//! - [`clean`]: `loadtest clean`;
//! - [`stages`]: `loadtest stages`;
//! - [`wallet`]: `loadtest wallet`.

pub mod clean;
pub mod replay;
pub mod stages;
pub mod wallet;
