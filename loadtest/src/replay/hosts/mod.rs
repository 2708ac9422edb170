//! The activity side of a replay: the SDK in this process, or in child processes (SDK
//! hosts) that a fault can kill with SIGKILL and start again.
//!
//! A real activity service holds the events it accepted in memory until a broker
//! takes them; when its process dies, those events die with it. To show what that
//! costs, a plan with a `kill-sdk-host` fault runs the SDK in `--sdk-hosts` child
//! processes (`sdk-host`, from `reward_standins::sdk_host`, at least two, so the others take the traffic while
//! one is down, as a load balancer in front of a fleet would). The schedule stays
//! here: each request goes to the next live host over the child's stdin as one JSON
//! line and its answer comes back on the child's stdout; each host has its own spool
//! directory, so a restarted host replays what its predecessor spooled.
//!
//! When a host dies, two kinds of reward are marked in the run's `hosts.tsv`:
//! - `accepted`: the host answered the call (the user was shown the reward). Its
//!   event may have died in the host's memory; if its token reached the store, the
//!   reward service's sweeper credits it after its grace period; if the host died
//!   before its deferred token write, nothing records the reward, and reconciliation
//!   counts it as lost with the host instead of missing.
//! - `in_doubt`: the call was in the host when it died, unanswered (the user saw an
//!   error). It may still have been stored (and so credited by the sweeper) or not.
//!
//! Reconciliation holds both kinds to the same rule as every other reward once their
//! token is in the store: credited exactly once. How many can have died unstored is
//! bounded: the token writes the host had not finished at its last counters, plus
//! the rewards it accepted after them, plus the calls in doubt; that bound is written
//! beside the marks, and reconciliation fails a run that lost more.
//!
//! A host that ends without closing when no fault killed it (a crash) fails the run:
//! its rewards are not excused.
//!
//! # Where each part lives
//! Here, the parent's side: `pool` (the pool of hosts: launch, pick, kill, bury,
//! close), `side` (the activity side a replay talks to: the SDK in process, or the
//! pool), `marks` (the rewards of killed hosts, which reconciliation reads). The host
//! itself, the JSON lines between the two and what a send came to are the stand-in's
//! (`reward_standins::sdk_host`).

mod pool;
mod side;
#[cfg(test)]
mod tests;

pub(crate) use self::pool::HostPool;
pub(crate) use self::side::Side;
pub use crate::marks::{Marks, STORE_IN_DOUBT, read_marks};
pub(crate) use reward_standins::sdk_host::Sent;
