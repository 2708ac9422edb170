//! The handler every source feeds: decode → limits → `GrantBatch` → settle each
//! message (done, parked for a retry, dead letter, failure topic) → mark its offset.
//!
//! The handler is [`Pipeline`]: its doc has the flow of one message, how each result
//! is settled and the key a retry is requeued under.

mod dispatch;
mod error;
mod grant;
mod handler;
mod item;
pub mod lag;
mod mover;
mod offsets;
mod part;
mod settle;
mod stats;
#[cfg(test)]
mod tests;

pub use self::error::PipelineError;
pub use self::grant::{GrantClient, TonicGrant};
pub use self::handler::Pipeline;
pub use self::item::Item;
pub use self::mover::mover;
pub use self::offsets::{Ack, Offsets};
pub use self::part::PartKey;
pub use self::settle::{queue_anywhere, requeue_key};
pub use self::stats::{Stats, StatsSnapshot};
