//! The command line's subcommands: each one's arguments (clap `Args`) and the handler
//! that runs it, prints its results and answers the process's exit status.
//!
//! - [`benches`]: `reward-bench send`, `reward-bench grant` and `reward-bench consumer`;
//! - [`smoke`]: `reward-bench smoke`.

pub mod benches;
pub mod smoke;
