//! A message on its way through the pipeline: as fetched, decoded, or parked.

use bytes::Bytes;
use proto::v1::RewardEvent;

use super::offsets::Ack;

/// A fetched message (a record from a source), or one event of a compound record.
#[derive(Debug)]
pub struct Item {
    /// The payload as fetched (a compound record's, until the pipeline unpacks it).
    pub raw: Bytes,
    /// Where to mark it done.
    pub ack: Ack,
}

/// A message decoded and checked, waiting for its turn.
pub(super) struct Ready {
    pub(super) item: Item,
    pub(super) event: RewardEvent,
}

/// Why a message is parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Park {
    Failed,
    Limited,
    Fused,
    Early,
}
