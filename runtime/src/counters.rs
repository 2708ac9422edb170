//! Counts kept once: the number a process reads (its stats file, its shutdown
//! report, a test) and the Prometheus counter a dashboard scrapes move in one step.
//!
//! A [`Counted`] holds its metric handle, registered when the count is made (not
//! looked up by name per event), next to an atomic this process reads back: the two
//! cannot drift, and counting costs one atomic add and the recorder's own add. A
//! [`Family`] is a labelled metric whose handles are registered once per label value
//! (a reward type, a producer), so the hot path neither formats nor allocates a
//! label. Handles made before the process installs its recorder count nothing in
//! Prometheus (the `metrics` crate's rule), so binaries install it first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use metrics::{Counter, Key, Label};

/// A count this process reads back, mirrored to a Prometheus counter.
#[derive(Debug)]
pub struct Counted {
    n: AtomicU64,
    metric: Counter,
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
        let key = Key::from_parts(name, labels);
        let metric = metrics::with_recorder(|r| r.register_counter(&key, &metadata()));
        Self {
            n: AtomicU64::new(0),
            metric,
        }
    }

    /// A count of `name` labelled `key = value`, for a value known only at run time
    /// (a producer's name): registered once, when the count is made.
    pub fn with_label(name: &'static str, key: &'static str, value: &str) -> Self {
        let key = Key::from_parts(name, vec![Label::new(key, value.to_string())]);
        let metric = metrics::with_recorder(|r| r.register_counter(&key, &metadata()));
        Self {
            n: AtomicU64::new(0),
            metric,
        }
    }

    /// Adds `k`.
    pub fn add(&self, k: u64) {
        self.n.fetch_add(k, Ordering::Relaxed);
        self.metric.increment(k);
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
