//! A partition: what the offsets and the lag figures are kept by.

use std::sync::Arc;

/// A partition: topic and number.
pub type PartKey = (Arc<str>, i32);
