//! What one probe measured.

use std::time::Duration;

use reward_stack::env::Server;

/// What one probe measured.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeReport {
    /// Which server.
    pub server: Server,
    /// Items written.
    pub written: u64,
    /// Distinct items read back.
    pub read_back: u64,
    /// Items delivered more than once (Kafka's consumer restart may redeliver).
    pub duplicates: u64,
    /// Time spent writing.
    pub write_time: Duration,
    /// Time spent reading.
    pub read_time: Duration,
    /// Free-form detail (consumer mode, partitions, ...).
    pub detail: String,
}

impl ProbeReport {
    /// Items written per second.
    pub fn write_rate(&self) -> f64 {
        reward_baseline::figures::rate(self.written, self.write_time)
    }

    /// Items read per second.
    pub fn read_rate(&self) -> f64 {
        reward_baseline::figures::rate(self.read_back + self.duplicates, self.read_time)
    }
}
