//! Consumer lag in time, for every source, and in records for RocketMQ.
//!
//! - `reward_consumer_lag_seconds{topic,partition}`: how long the oldest record this
//!   member fetched and has not settled has been on the broker (now minus the broker's
//!   timestamp of the lowest unsettled offset, the one holding the commit back); 0
//!   when nothing is unsettled. Records not fetched yet are younger than the ones
//!   fetched as long as the member fetches, so while it lives this is the partition's
//!   lag in time, whatever a record packs. A member that stopped fetching shows as
//!   down (its `up` series), not here.
//! - `reward_consumer_lag_records{topic,partition}` for RocketMQ: the queue's max
//!   offset (which the broker sends with every pull, property `MAX_OFFSET`) minus
//!   the lowest unsettled offset, or minus the next offset to fetch when nothing is
//!   unsettled. Kafka's comes from a watermark request instead (`kafka.rs`).
//!
//! RocketMQ's push consumer does not say which queues it holds, so a queue is known
//! by its records: one that delivered nothing for [`FORGET_AFTER`] and has nothing
//! unsettled (moved to another member, or idle and caught up) goes back to 0 and
//! is forgotten. Kafka's partitions are forgotten when revoked.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::part::PartKey;

/// A queue silent this long, with nothing unsettled, is forgotten (gauges at 0).
pub const FORGET_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct PartLag {
    /// Unsettled offsets and their broker timestamps (ms since the epoch).
    unsettled: BTreeMap<i64, i64>,
    /// The queue's max offset as last reported by the broker (RocketMQ only).
    high: Option<i64>,
    /// The offset after the highest one fetched.
    next: i64,
    last_fetch: Instant,
}

/// Per-partition lag bookkeeping shared by a source (which records fetches) and the
/// pipeline (which records settlements).
#[derive(Debug, Default)]
pub struct Lag {
    parts: Mutex<HashMap<PartKey, PartLag>>,
}

/// One partition's figures at a report.
#[derive(Debug, Clone, PartialEq)]
pub struct PartFigures {
    /// Seconds the oldest unsettled record has been on the broker.
    pub seconds: f64,
    /// Records behind the broker's max offset, when the broker said it.
    pub records: Option<i64>,
}

impl Lag {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PartKey, PartLag>> {
        // Each method changes one entry in one step: a panic elsewhere leaves it whole.
        self.parts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A record was fetched: `stored_ms` is the broker's timestamp (None or not
    /// positive: unknown, counted as now), `high` the max offset the broker reported
    /// with it (RocketMQ), if any.
    pub fn fetched(&self, part: &PartKey, offset: i64, stored_ms: Option<i64>, high: Option<i64>) {
        let stored = stored_ms.filter(|t| *t > 0).unwrap_or_else(now_ms);
        let mut parts = self.lock();
        let p = parts.entry(part.clone()).or_insert_with(|| PartLag {
            unsettled: BTreeMap::new(),
            high: None,
            next: offset,
            last_fetch: Instant::now(),
        });
        p.unsettled.insert(offset, stored);
        p.next = p.next.max(offset.saturating_add(1));
        if let Some(h) = high {
            p.high = Some(p.high.map_or(h, |old| old.max(h)));
        }
        p.last_fetch = Instant::now();
    }

    /// Partitions (queues) known now: read from in the last [`FORGET_AFTER`], or
    /// holding unsettled records.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// No partition known.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// A record was settled (all of its events).
    pub fn settled(&self, part: &PartKey, offset: i64) {
        if let Some(p) = self.lock().get_mut(part) {
            p.unsettled.remove(&offset);
        }
    }

    /// Partitions revoked from this member: forgotten, their gauges at 0.
    pub fn forget(&self, parts: &[PartKey]) {
        let mut all = self.lock();
        for part in parts {
            if all.remove(part).is_some() {
                set_gauges(part, 0.0, None);
            }
        }
    }

    /// Each partition's figures at `now_ms`; forgets the silent ones (see the module
    /// docs), answering them with zeros.
    pub fn figures(&self, now_ms: i64) -> Vec<(PartKey, PartFigures)> {
        figures(&mut self.lock(), now_ms)
    }

    /// Sets the gauges from [`Lag::figures`], under the lock [`Lag::forget`] takes, so
    /// a report never writes over a revoked partition's 0.
    pub fn report(&self) {
        let mut all = self.lock();
        for (part, f) in figures(&mut all, now_ms()) {
            set_gauges(&part, f.seconds, f.records);
        }
    }
}

fn figures(all: &mut HashMap<PartKey, PartLag>, now_ms: i64) -> Vec<(PartKey, PartFigures)> {
    let mut out = Vec::with_capacity(all.len());
    all.retain(|part, p| {
        let oldest = p.unsettled.iter().next();
        let seconds = oldest.map_or(0.0, |(_, t)| {
            (now_ms.saturating_sub(*t)).max(0) as f64 / 1000.0
        });
        let from = oldest.map_or(p.next, |(o, _)| *o);
        let records = p.high.map(|h| h.saturating_sub(from).max(0));
        let keep = !p.unsettled.is_empty() || p.last_fetch.elapsed() < FORGET_AFTER;
        let figures = if keep {
            PartFigures { seconds, records }
        } else {
            PartFigures {
                seconds: 0.0,
                records: p.high.map(|_| 0),
            }
        };
        out.push((part.clone(), figures));
        keep
    });
    out
}

fn set_gauges(part: &PartKey, seconds: f64, records: Option<i64>) {
    let (t, n) = (part.0.to_string(), part.1.to_string());
    if let Some(r) = records {
        metrics::gauge!("reward_consumer_lag_records", "topic" => t.clone(), "partition" => n.clone())
            .set(r as f64);
    }
    metrics::gauge!("reward_consumer_lag_seconds", "topic" => t, "partition" => n).set(seconds);
}

/// Milliseconds since the epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn part(n: i32) -> PartKey {
        (Arc::from("t"), n)
    }

    #[test]
    fn seconds_follow_the_oldest_unsettled_record() {
        let lag = Lag::default();
        lag.fetched(&part(0), 10, Some(1_000), Some(20));
        lag.fetched(&part(0), 11, Some(4_000), Some(25));
        let f = lag.figures(6_000);
        assert_eq!(
            f,
            vec![(
                part(0),
                PartFigures {
                    seconds: 5.0,
                    records: Some(15)
                }
            )]
        );
        lag.settled(&part(0), 10);
        assert_eq!(lag.figures(6_000)[0].1.seconds, 2.0);
        assert_eq!(lag.figures(6_000)[0].1.records, Some(14));
        lag.settled(&part(0), 11);
        // Nothing unsettled: 0 s, and the max offset against the next offset to fetch.
        assert_eq!(
            lag.figures(6_000)[0].1,
            PartFigures {
                seconds: 0.0,
                records: Some(13)
            }
        );
    }

    #[test]
    fn kafka_partitions_have_no_record_figure_and_are_forgotten_on_revoke() {
        let lag = Lag::default();
        lag.fetched(&part(1), 5, Some(1_000), None);
        assert_eq!(lag.figures(3_000)[0].1.records, None);
        lag.forget(&[part(1)]);
        assert!(lag.figures(3_000).is_empty());
        // A settlement after the revoke changes nothing.
        lag.settled(&part(1), 5);
        assert!(lag.figures(3_000).is_empty());
    }

    #[test]
    fn an_unknown_or_future_timestamp_never_gives_a_negative_lag() {
        let lag = Lag::default();
        lag.fetched(&part(2), 0, None, None);
        lag.fetched(&part(3), 0, Some(10_000), None);
        for (_, f) in lag.figures(5_000) {
            assert!(f.seconds >= 0.0, "{f:?}");
        }
    }

    proptest! {
        /// Whatever the order of fetches and settlements, the figures name the lowest
        /// unsettled offset: seconds from its timestamp, records from it to the max.
        #[test]
        fn figures_match_a_model(
            stamps in proptest::collection::vec(1i64..1_000_000, 1..40),
            settle in proptest::collection::vec(any::<bool>(), 40),
            high_extra in 0i64..100,
        ) {
            let lag = Lag::default();
            let n = stamps.len() as i64;
            for (i, t) in stamps.iter().enumerate() {
                lag.fetched(&part(0), i as i64, Some(*t), Some(n + high_extra));
            }
            let mut open = Vec::new();
            for (i, t) in stamps.iter().enumerate() {
                if settle[i] {
                    lag.settled(&part(0), i as i64);
                } else {
                    open.push((i as i64, *t));
                }
            }
            let now = 2_000_000;
            let f = lag.figures(now);
            prop_assert_eq!(f.len(), 1);
            let (want_s, from) = open.first().map_or((0.0, n), |(o, t)| ((now - t) as f64 / 1000.0, *o));
            prop_assert_eq!(f[0].1.seconds, want_s);
            prop_assert_eq!(f[0].1.records, Some(n + high_extra - from));
        }
    }
}
