//! The books: proof from Redis that every reward sent was credited exactly once, within
//! budget, with its token where the user's wallet looks for it.
//!
//! The expected side is a sent list ([`read_sent`]: one line per `send_reward` that
//! the SDK accepted); the stored side is read directly from the ledger (the service's
//! built-in downstream), the claim store's budget shards and the token hashes, never
//! from any service's own counters. A load-test replay checks its run with it
//! (`loadtest reconcile DIR`); an operator checks an activity's books after an event
//! with `reward-ctl books`.
//!
//! | check | passes when |
//! | --- | --- |
//! | credited once | every distinct sent trade number is in its user's ledger |
//! | nothing extra | the ledger holds no trade number that was not sent (for the users sent to) |
//! | amounts | each user's balance per type equals the sum of their sent amounts |
//! | no double credit | the ledger's double-credit counters are all zero |
//! | budget | spent per scene equals the credits of that scene, and is within budget |
//! | tokens | every sent trade's token is in the user's pending or credited hash (or its write failure was counted), credited ones moved to the credited hash, no token for a trade not sent |
//! | lost with a killed host | (only with [`Expected::excused`]) no more excused rewards died unstored than the bound allows |
//!
//! A repeated send must carry the same type, amount and user as the first; a mismatch
//! is reported as a conflict.
//!
//! Marked rewards ([`Excused`]) are those a dead sender answered (or held
//! unanswered) when it died, each with how ([`Marked`]). One whose token is in the
//! store is held to every check above. One with no token and no credit is excused,
//! counted as **lost with the host** and left out of the expected balances, only if
//! the sender never said the reward was held: a call in doubt (unanswered when the
//! sender died: the user saw an error) or, with deferred token writes, a call answered
//! before its write landed. A reward whose answer came after its token was stored
//! ([`Marked::Stored`], the SDK's default direct writes), or after a broker or the
//! sender's spool held its event while Redis did not answer ([`Marked::Queued`]), is
//! never excused: missing is missing (a queued one's token may have died with the
//! sender, and counts with the tokens lost with the host). The row fails when more
//! were lost than the bound.
//!
//! # Where each part lives
//! `sent` (the sent list), `stores` (where the books live), `expected` (what they
//! should show), `read` (connecting and reading the stores, the tally), `checks` (the
//! rows), `report` (the table), `reconcile` (the entry point [`check`]).

mod checks;
mod expected;
mod read;
mod reconcile;
mod report;
mod sent;
mod stores;
#[cfg(test)]
mod tests;

pub use self::expected::{Excused, Expected, Marked};
pub use self::reconcile::{check, unanswered};
pub use self::report::{Check, Reconciliation};
pub use self::sent::{SentReward, read_sent};
pub use self::stores::Stores;
