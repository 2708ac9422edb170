//! The SDK host: an activity service reduced to its SDK, in a process of its own, so
//! that a drill can kill it with SIGKILL the way an activity service's host dies, and
//! start it again.
//!
//! The host (`sdk-host --config FILE`) starts an SDK from its config file and serves
//! `send_reward` calls: one JSON request per line on stdin ([`wire::WireRequest`]),
//! one answer per line on stdout ([`wire::FromHost::Answer`]), the SDK's counters every
//! second ([`wire::FromHost::Stats`]); when stdin ends it closes the SDK (30 s at most)
//! and reports its last counters ([`wire::FromHost::Closed`]). Each host has its own
//! spool directory in its config, so a restarted host replays what its predecessor
//! spooled.
//!
//! The parent side (the load tester's pool of hosts: launch, pick, kill, bury) is
//! `loadtest::replay::hosts`; it finds this binary beside its own.
//!
//! # Where each part lives
//! `outcome` (what a send came to, a host's counters, shared by both sides), `wire`
//! (the JSON lines between the parent and a host), `serve` (the host's own loop).

pub mod outcome;
pub mod serve;
#[cfg(test)]
mod tests;
pub mod wire;

pub use self::outcome::{HostStats, KINDS, Sent, refusal};
pub use self::serve::serve;
pub use self::wire::{FromHost, WireRequest};

/// The host binary's name: the parent starts `<its own directory>/sdk-host`.
pub const BINARY: &str = "sdk-host";
