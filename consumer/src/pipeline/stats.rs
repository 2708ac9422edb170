//! The pipeline's counts since start. Each is a [`Counted`]: the number this process
//! reads (progress lines, the stats file, the shutdown report) and the Prometheus
//! counter move in one step, with the metric handle registered once when the
//! pipeline starts. Labelled counts are one `Counted` per label value, summed in the
//! snapshot; the credited count is labelled by reward type, whose handles are
//! registered the first time a type is seen.

use std::sync::atomic::{AtomicU64, Ordering};

use proto::reasons::DeadLetterReason;
use reward_runtime::counters::{Counted, Family};

/// Why a message went back to the delay queue or its virtual queue
/// (`reward_consumer_requeued_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Requeue {
    /// A retryable failure.
    Failed,
    /// Over its type's rate.
    Limited,
    /// Its type is fused.
    Fused,
    /// Not due yet.
    Early,
    /// Straight back to the virtual queue (Redis refused the park).
    Direct,
}

impl Requeue {
    const ALL: [Requeue; 5] = [
        Self::Failed,
        Self::Limited,
        Self::Fused,
        Self::Early,
        Self::Direct,
    ];

    const fn label(self) -> &'static str {
        match self {
            Self::Failed => "failed",
            Self::Limited => "limited",
            Self::Fused => "fused",
            Self::Early => "early",
            Self::Direct => "direct",
        }
    }
}

/// What found no queue and was only logged (`reward_consumer_last_resort_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LastResort {
    /// A requeue.
    Requeue,
    /// A dead letter or failure record.
    DeadLetter,
}

impl LastResort {
    pub(super) const fn label(self) -> &'static str {
        match self {
            Self::Requeue => "requeue",
            Self::DeadLetter => "dead_letter",
        }
    }
}

/// Counts since start.
#[derive(Debug)]
pub struct Stats {
    consumed: Counted,
    granted: AtomicU64,
    granted_by_type: Family,
    duplicates: Counted,
    requeued: [Counted; 5],
    /// Dead letters and failure records by reason, in `DeadLetterReason::ALL` order.
    letters: Vec<(DeadLetterReason, Counted)>,
    failed_permanent: Counted,
    in_doubt: Counted,
    decode_errors: Counted,
    last_resort: [Counted; 2],
    limiter_waits: Counted,
    moved: Counted,
    service_errors: Counted,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    /// Counts at zero, their metric handles registered.
    pub fn new() -> Self {
        let letters = DeadLetterReason::ALL
            .into_iter()
            .map(|r| {
                let name = if r.is_dead_letter() {
                    "reward_consumer_dead_lettered_total"
                } else {
                    "reward_consumer_failure_topic_total"
                };
                (r, Counted::new(name, &[("reason", r.as_str())]))
            })
            .collect();
        let requeued = Requeue::ALL
            .map(|r| Counted::new("reward_consumer_requeued_total", &[("reason", r.label())]));
        let last_resort = [LastResort::Requeue, LastResort::DeadLetter].map(|w| {
            Counted::new(
                "reward_consumer_last_resort_total",
                &[("reason", w.label())],
            )
        });
        Self {
            consumed: Counted::new("reward_consumer_consumed_total", &[]),
            granted: AtomicU64::new(0),
            granted_by_type: Family::new("reward_consumer_granted_total", "type"),
            duplicates: Counted::new("reward_consumer_duplicates_total", &[]),
            requeued,
            letters,
            failed_permanent: Counted::new("reward_consumer_failed_permanent_total", &[]),
            in_doubt: Counted::new("reward_consumer_in_doubt_total", &[]),
            decode_errors: Counted::new(
                "reward_consumer_decode_errors_total",
                &[("reason", DeadLetterReason::Decode.as_str())],
            ),
            last_resort,
            limiter_waits: Counted::new("reward_consumer_limiter_waits_total", &[]),
            moved: Counted::new("reward_consumer_moved_total", &[]),
            service_errors: Counted::new("reward_consumer_service_errors_total", &[]),
        }
    }

    pub(super) fn consumed(&self) {
        self.consumed.inc();
    }

    pub(super) fn granted(&self, reward_type: &str) {
        self.granted.fetch_add(1, Ordering::Relaxed);
        self.granted_by_type.get(reward_type).increment(1);
    }

    pub(super) fn duplicate(&self) {
        self.duplicates.inc();
    }

    pub(super) fn requeued(&self, why: Requeue) {
        self.requeued[why as usize].inc();
    }

    pub(super) fn lettered(&self, why: DeadLetterReason) {
        if let Some((_, c)) = self.letters.iter().find(|(r, _)| *r == why) {
            c.inc();
        }
    }

    pub(super) fn failed_permanent(&self) {
        self.failed_permanent.inc();
    }

    pub(super) fn in_doubt(&self) {
        self.in_doubt.inc();
    }

    pub(super) fn decode_error(&self) {
        self.decode_errors.inc();
    }

    pub(super) fn last_resort(&self, what: LastResort) {
        self.last_resort[what as usize].inc();
    }

    pub(super) fn limiter_wait(&self) {
        self.limiter_waits.inc();
    }

    pub(super) fn moved(&self, n: u64) {
        self.moved.add(n);
    }

    pub(super) fn service_error(&self) {
        self.service_errors.inc();
    }

    fn letters(&self, dead: bool) -> u64 {
        self.letters
            .iter()
            .filter(|(r, _)| r.is_dead_letter() == dead)
            .map(|(_, c)| c.get())
            .sum()
    }

    /// The counts now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let requeued = |r: Requeue| self.requeued[r as usize].get();
        StatsSnapshot {
            consumed: self.consumed.get(),
            granted: self.granted.load(Ordering::Relaxed),
            duplicates: self.duplicates.get(),
            requeued_failed: requeued(Requeue::Failed),
            requeued_limited: requeued(Requeue::Limited),
            requeued_fused: requeued(Requeue::Fused),
            requeued_early: requeued(Requeue::Early),
            requeued_direct: requeued(Requeue::Direct),
            dead_lettered: self.letters(true),
            failure_topic: self.letters(false),
            failed_permanent: self.failed_permanent.get() + self.in_doubt.get(),
            decode_errors: self.decode_errors.get(),
            last_resort: self.last_resort.iter().map(Counted::get).sum(),
            limiter_waits: self.limiter_waits.get(),
            moved: self.moved.get(),
            service_errors: self.service_errors.get(),
        }
    }
}

/// A copy of [`Stats`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct StatsSnapshot {
    /// Messages taken from the source.
    pub consumed: u64,
    /// Credited by this consumer's calls.
    pub granted: u64,
    /// Already credited earlier (a redelivery).
    pub duplicates: u64,
    /// Parked after a retryable failure.
    pub requeued_failed: u64,
    /// Parked: over the type's rate.
    pub requeued_limited: u64,
    /// Parked: the type is fused.
    pub requeued_fused: u64,
    /// Parked: not due yet.
    pub requeued_early: u64,
    /// Sent back to the virtual queue at once because Redis refused the park.
    pub requeued_direct: u64,
    /// Dead letters written (decode errors and exhausted retries).
    pub dead_lettered: u64,
    /// Written to the failure topic by this consumer.
    pub failure_topic: u64,
    /// Failed for good or held in doubt (the service wrote the failure topic or holds
    /// the record for an operator).
    pub failed_permanent: u64,
    /// Payloads that did not decode.
    pub decode_errors: u64,
    /// Only logged: nothing took them.
    pub last_resort: u64,
    /// Times the dispatcher waited for the global limit.
    pub limiter_waits: u64,
    /// Parked messages moved back to the virtual queue.
    pub moved: u64,
    /// GrantBatch calls that failed at the transport.
    pub service_errors: u64,
}
