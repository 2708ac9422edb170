//! Counts kept once: the number a process reads (its stats file, its shutdown
//! report, a test) and the Prometheus counter a dashboard scrapes move in one step.
//!
//! A [`Counted`] holds its metric handle next to an atomic this process reads back:
//! the two cannot drift, and counting costs one atomic add and the recorder's own add.
//! The handle is registered with the process's recorder the first time the count
//! moves and kept after (never looked up by name per event), so a series appears when
//! it first counts, as with the `metrics` macros, and a library that makes its counts
//! at start-up still reports to a recorder its host installs later, as long as that
//! is before the first event. A [`Family`] is a labelled metric whose handles are
//! registered once per label value (a reward type, a producer), so the hot path
//! neither formats nor allocates a label.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use metrics::{Counter, Histogram, Key, Label};

/// A count this process reads back, mirrored to a Prometheus counter.
#[derive(Debug)]
pub struct Counted {
    n: AtomicU64,
    key: Key,
    metric: OnceLock<Counter>,
}

impl Counted {
    /// A count of `name` with fixed `labels` (static strings: no allocation per event).
    ///
    /// ```
    /// use reward_runtime::counters::Counted;
    /// let c = Counted::new("reward_example_total", &[("reason", "limited")]);
    /// c.add(2);
    /// c.inc();
    /// assert_eq!(c.get(), 3);
    /// ```
    pub fn new(name: &'static str, labels: &[(&'static str, &'static str)]) -> Self {
        let labels: Vec<Label> = labels
            .iter()
            .map(|(k, v)| Label::from_static_parts(k, v))
            .collect();
        Self::of(Key::from_parts(name, labels))
    }

    /// A count of `name` labelled `key = value`, for a value known only at run time
    /// (a producer's name).
    pub fn with_label(name: &'static str, key: &'static str, value: &str) -> Self {
        Self::of(Key::from_parts(
            name,
            vec![Label::new(key, value.to_string())],
        ))
    }

    fn of(key: Key) -> Self {
        Self {
            n: AtomicU64::new(0),
            key,
            metric: OnceLock::new(),
        }
    }

    /// Adds `k`.
    pub fn add(&self, k: u64) {
        self.n.fetch_add(k, Ordering::Relaxed);
        self.metric
            .get_or_init(|| metrics::with_recorder(|r| r.register_counter(&self.key, &metadata())))
            .increment(k);
    }

    /// Adds one.
    pub fn inc(&self) {
        self.add(1);
    }

    /// The count since this value was made.
    pub fn get(&self) -> u64 {
        self.n.load(Ordering::Relaxed)
    }
}

/// A histogram handle registered on first use and kept (a producer's send times).
#[derive(Debug)]
pub struct Timing {
    key: Key,
    metric: OnceLock<Histogram>,
}

impl Timing {
    /// The histogram `name`, unlabelled.
    pub fn new(name: &'static str) -> Self {
        Self {
            key: Key::from_name(name),
            metric: OnceLock::new(),
        }
    }

    /// The histogram `name` labelled `key = value`.
    pub fn with_label(name: &'static str, key: &'static str, value: &str) -> Self {
        Self {
            key: Key::from_parts(name, vec![Label::new(key, value.to_string())]),
            metric: OnceLock::new(),
        }
    }

    /// Records one value (seconds, for `*_seconds` histograms).
    pub fn record(&self, v: f64) {
        self.metric
            .get_or_init(|| {
                metrics::with_recorder(|r| r.register_histogram(&self.key, &metadata()))
            })
            .record(v);
    }
}

fn metadata() -> metrics::Metadata<'static> {
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()))
}

/// A counter labelled by one open-ended value (a reward type, a producer name): each
/// value's handle is registered the first time it is seen and reused after.
#[derive(Debug, Clone)]
pub struct Family {
    name: &'static str,
    label: &'static str,
    handles: Arc<RwLock<HashMap<Arc<str>, Counter>>>,
}

impl Family {
    /// The counter `name`, labelled `label = <value>`.
    pub fn new(name: &'static str, label: &'static str) -> Self {
        Self {
            name,
            label,
            handles: Arc::default(),
        }
    }

    /// The handle for `value` (registered on first use).
    ///
    /// ```
    /// let f = reward_runtime::counters::Family::new("reward_example_total", "type");
    /// f.get("cash").increment(1);
    /// f.get("cash").increment(1); // the same handle, no new registration
    /// ```
    pub fn get(&self, value: &str) -> Counter {
        if let Ok(map) = self.handles.read()
            && let Some(c) = map.get(value)
        {
            return c.clone();
        }
        let key = Key::from_parts(self.name, vec![Label::new(self.label, value.to_string())]);
        let counter = metrics::with_recorder(|r| r.register_counter(&key, &metadata()));
        if let Ok(mut map) = self.handles.write() {
            map.entry(Arc::from(value))
                .or_insert_with(|| counter.clone());
        }
        counter
    }
}
