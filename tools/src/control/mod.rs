//! `reward-ctl`: the one command operators turn the pipeline's knobs with during an
//! event, validated before anything is written, every change audited.
//!
//! # What it changes
//! - The shared dynamic document (a Redis hash of dotted keys, see
//!   `docs/dynamic-config.md`) that every SDK and consumer instance polls every
//!   500 ms: per-type rate, burst, priority and fuse; the global limit; per-queue
//!   ratio, producers and topic; type → queue routing. Every running instance applies
//!   a change within one poll (the consumer's limiter is swapped at once).
//! - Budgets, which live in Redis already (the claim store's shard caps): a change
//!   reaches every reward service at its next grant.
//!
//! # Validation
//! A change is checked three ways before it is written: the key must be a known knob
//! of [`schema::KNOBS`] (its reward type, queue or producer must exist in the configs
//! the instances run with), the value must be in the knob's range, and the whole resulting document
//! must pass the same checks a running instance makes
//! ([`reward_consumer::limits::LimitsConfig::with_overrides`], [`sdk::check_dynamic`]).
//! A refused change writes nothing and exits non-zero with the reason; without this a
//! bad value would sit in the hash while every instance refused it.
//!
//! # Audit
//! Every change appends a JSON line `{at_unix_ms, who, key, old, new}` to a Redis
//! sorted set beside the document (`<key>:audit`, by time, the last 10 000, so every operator sees the same
//! history: `reward-ctl changes`) and to a local file. `who` is `--who`, else
//! `REWARD_CTL_USER`, `SUDO_USER` or `USER`.

mod budgets;
mod doubt;
mod error;
mod known;
mod overrides;
pub mod schema;
mod session;
mod trail;

pub use self::error::ControlError;
pub use self::known::Known;
pub use self::session::Control;
/// One audit record (the change trail's entry).
pub use reward_service::trail::TrailEntry as AuditEntry;
