//! Stand-ins: processes that play, in drills and replays, the parts of the world the
//! pipeline talks to but does not own. Nothing here runs in production, and nothing
//! here is called a wallet: the user's wallet page is the reward service's
//! (`reward_service::http`), the ledger is the service's downstream
//! (`reward_service::downstream`).
//!
//! - [`downstream`]: the downstream double, an HTTP service that keeps the reward
//!   service's downstream contract (idempotency keys, status queries) in front of the
//!   real Redis ledger and can fail, slow down or answer after the credit, on command;
//! - [`sdk_host`]: an activity service reduced to its SDK in a process of its own
//!   (binary `sdk-host`), which a drill kills and restarts.

pub mod downstream;
pub mod sdk_host;
