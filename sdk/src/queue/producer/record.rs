//! One broker record on its way.

use bytes::Bytes;

/// One broker record on its way: one event, or a compound record of several.
#[derive(Debug, Clone)]
pub struct OutMsg {
    /// Partition / sharding key: the event's key (for a compound record, its first
    /// event's).
    pub key: String,
    /// The encoded event, or a [`proto::pack`] record.
    pub payload: Bytes,
}
