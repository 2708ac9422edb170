//! What one lease of the fleet's buckets asks for and what it granted: the
//! bookkeeping the live limits ([`super::Limits`]) fill and [`crate::fleet`] sends.

/// One bucket's part of a lease: what to give back and what to ask for.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The bucket's name (a reward type; unused for the global valve).
    pub name: String,
    /// Fleet rate, credits/s.
    pub rate: f64,
    /// The bucket's capacity.
    pub cap: f64,
    /// Permits returned.
    pub give: i64,
    /// Permits wanted.
    pub want: i64,
}

/// What one lease call asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Per reward type.
    pub types: Vec<Ask>,
    /// The global valve.
    pub global: Ask,
    /// Global permits spent since the last lease.
    pub global_used: i64,
    /// Priorities waiting for the global valve, highest first.
    pub classes: Vec<u8>,
}

/// What a lease granted.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    /// Instances live now (this one included).
    pub live: u32,
    /// Per type, in the plan's order.
    pub types: Vec<i64>,
    /// Global permits.
    pub global: i64,
}
