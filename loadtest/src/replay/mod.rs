//! `loadtest replay`: play a profile's traffic through the real SDK against the local
//! stack, wait until every reward is credited, reconcile, report.
//!
//! # Open-model arrival
//! Each scene has a scheduler that knows when its n-th request is due (the inverse of
//! the arrival curve's integral, [`crate::profile::Curve::time_of`]) and starts it
//! then, as its own task, whether or not earlier requests have returned: a slow call
//! never delays the next one, so latency is measured free of coordinated omission
//! (the approach of wrk2 and of k6's arrival-rate executors). Latency is taken from
//! the request's **intended** start; the lag between intended and actual start (the
//! load tester's own tardiness, e.g. when the machine is saturated) is reported
//! beside it. Requests in flight are capped (`--max-in-flight`, default
//! [`MAX_IN_FLIGHT`]): past it a request is shed and counted, never silently dropped.
//!
//! # A generator that cannot keep up
//! When the machine cannot generate the schedule, latency figures describe the load
//! tester, not the pipeline. The first shed arrival, or a request starting more than
//! [`crate::slo::ABORT_LAG`] late, stops the schedule early (what was sent is still
//! drained, credited and reconciled), and the run is reported **invalid**
//! ([`crate::slo`]), never passed.
//!
//! # From send to credit
//! The ledger keeps each credited trade number's credit time, and `sent.tsv` keeps
//! its send time, so end-to-end latency and the credited rate per second are computed
//! for every reward after the run, not sampled.
//!
//! # Draining
//! After the schedule ends the replay waits for the SDK to hand every event to a
//! broker (spooled ones included), then for the budgets' spent amounts to reach what
//! was sent, then for the ledger to hold every distinct trade number sent (a claim
//! deducts its budget before the downstream credits, so budgets run ahead); no
//! progress for `--drain-secs` ends a wait (reconciliation then reports what is
//! missing). Consumers and the service are stopped gracefully.

mod assemble;
mod children;
mod collect;
pub mod discovery;
mod drain;
pub mod hosts;
mod inject;
mod latency;
mod links;
mod options;
pub mod pipeline;
mod prometheus_dir;
pub mod recovery;
mod report;
mod run;
mod schedule;
mod second;
mod steps;

pub use self::children::scrape;
pub use self::latency::Latency;
pub use self::options::{MAX_IN_FLIGHT, ReplayOptions};
pub use self::report::{Ceilings, LimitedRate, ReplayReport};
pub use self::second::Second;
pub use self::steps::run;
