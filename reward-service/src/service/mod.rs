//! What both APIs do, independent of their wire: grants (sync, async, batch) and the
//! wallet's token checks.
//!
//! # Sync, async and batch grants
//! - **Grant**: claim, credit, finish ([`crate::grant`]); the answer is the
//!   downstream's.
//! - **GrantAsync**: the claim (idempotency and budget) runs now; on success the claim's
//!   lease is released at once and the event goes to the SDK's virtual queue, routed by
//!   its reward type like any reward, and the answer is `ACCEPTED`. The record stays
//!   `IN_PROGRESS` with no live lease, so the consumer that later calls `GrantBatch`
//!   for the event takes it over without a second deduction and credits it. A repeated
//!   GrantAsync before that takes it over too and queues the event again; the second
//!   delivery then finds `GRANTED` (`DUPLICATE`). If the queue refuses (closing, or
//!   full past its wait), the answer is `RETRY_LATER`: the deduction stands and the
//!   caller's retry takes the claim over.
//! - **GrantBatch**: each event as in Grant, all of them at once, answered in request
//!   order. The claims, and the final `GRANTED` marks, go to Redis as one script call
//!   per batch (per budget shard on a Redis Cluster) rather than one per event
//!   (`Granter::grant_many`); the credits go as one call per reward type, and the
//!   token moves as one call per batch (per slot on a cluster).
//!
//! # Budget scope
//! A grant's budget is its event's `activity_id/scene_id` ([`scope`]).
//!
//! # Wallet checks
//! A token presented by a client is checked against the user and activity it is
//! presented for (they are its AEAD binding, so another user's token does not open):
//! - `ILLEGAL`: does not open (bad base64, unknown key, forged, another user's or
//!   activity's);
//! - `LEGAL`: opens, and the server knows the trade number: the token is in the user's
//!   hash (pending or credited), or the claim store has its record. `credited` is true
//!   when the record says `GRANTED`;
//! - `UNKNOWN`: opens, but the server holds nothing of it (its token write failed and no
//!   grant has started yet, or every record of it expired). Never credited from the
//!   wallet: the event, if it exists, is still on its way through the queue.
//!
//! Withdrawal grants every `LEGAL`, uncredited token at once, synchronously, with the
//! token's own fields (the token is authentic: only the key holder can seal one).

mod admission;
mod batch;
mod error;
mod event;
mod handle;
mod proofs;
mod refusal;
mod results;
mod single;
mod wallet;

pub use self::error::ServiceError;
pub use self::event::{expired, grant_of, scope};
pub use self::handle::Service;
pub use self::proofs::{EventsConfig, MAX_ACCEPT_WINDOW_MS, Proofs};
pub use self::refusal::{REFUSAL_CODES, Refusal};
pub use self::results::{count_outcomes, result_of};
pub use self::wallet::{Checked, Rewards, event_of};
