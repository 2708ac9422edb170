//! One grant, end to end: claim (idempotency + budget), credit downstream, finish.
//!
//! | claim says | credit | then | caller gets |
//! | --- | --- | --- | --- |
//! | claimed | ok | mark `GRANTED` with the receipt (retried if Redis fails) | `Granted` |
//! | claimed | failed, nothing credited (rate limited, connection refused, "not credited") | release the claim (the deduction stands for the retry) | `RetryLater` |
//! | claimed | **in doubt** (timeout, reset, 5xx, key in use) | record `IN_DOUBT`, leased for the downstream's longest call | `RetryLater` when the downstream can resolve it, else `InDoubt` |
//! | claimed | permanent error (invalid, account closed) | mark `FAILED`, refund, append to the failure archive | `FailedPermanent` |
//! | taken over from an owner that vanished, or in doubt | first **resolve**: ask the downstream's status (credited → `GRANTED`; not credited → credit); without a status route, repeat with the same idempotency key if it is honoured; with neither, hold `IN_DOUBT` | | as above, or `InDoubt` |
//! | duplicate | - | - | `Granted` with `duplicate: true` and the first receipt |
//! | live lease elsewhere | - | - | `RetryLater` |
//!
//! A timeout is never taken to mean "not credited": every downstream call can do its
//! work and still lose its answer ([`crate::downstream`] has the contract). A grant
//! held `InDoubt` is never credited again automatically; operators list and settle it
//! (`reward-ctl in-doubt`, [`Claims::settle_doubt`](crate::claim::Claims::settle_doubt)), and the
//! `reward_service_in_doubt` gauge counts them.
//!
//! A reward type with no downstream configured is refused before any claim by the
//! service (`UNKNOWN_REWARD_TYPE`, nothing recorded, so the corrected request is
//! credited). A grant claimed while its type had a downstream that is gone now is a
//! permanent failure of that grant (refunded and archived), never a silent drop.
//!
//! # After the outcome
//! - **Granted**: the user's token moves out of the pending hash ([`crate::tokens`]).
//! - **Failed for good**: two records, both before the call returns. The failure
//!   archive, a JSON-lines file (one object per failed grant, appended and fsynced),
//!   is the local, always-available copy. The failure topic gets a
//!   [`proto::v1::DeadLetter`] (reason `permanent`) through the SDK's virtual queue,
//!   so it reaches a broker, or the SDK's spool, like any reward event; operators and
//!   the reconciliation read it there. Only the owner of the claim writes them, so a
//!   failure is recorded once however often the trade number comes back.

mod error;
mod failure;
mod granter;
mod many;
mod outcome;
mod resolve;
mod single;
mod topic;

pub use self::error::GrantError;
pub use self::failure::failure_topic_misses;
pub use self::granter::Granter;
pub use self::outcome::{Outcome, settled};
pub use self::resolve::SETTLE_MARGIN_MS;
pub use self::topic::FailureTopic;
