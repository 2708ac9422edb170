//! Windowed offset tracking: which offsets of a partition may be committed.
//!
//! Messages of one partition are handled concurrently and finish in any order, but a
//! broker keeps one committed offset per partition: everything below it counts as
//! done. Committing the highest finished offset would skip the unfinished ones below
//! it after a crash; committing only after each message in turn would serialise the
//! partition. The window sits between the two:
//!
//! - [`Window::track`] appends a fetched offset to an ordered ring of slots (offsets
//!   of a partition rise, but need not be contiguous: compaction and transaction
//!   markers leave gaps);
//! - [`Window::complete`] finds the slot and flags it. The map from offset to slot is
//!   arithmetic: `offset - first offset in the window`, checked against the slot; that
//!   is O(1) whenever the window holds no gap (the usual case), and a binary search
//!   over the ordered ring, O(log window), when it does. A hash map would do the
//!   same in O(1) always, but at many times the bare ring's cost a message, most of
//!   it hashing (docs/findings/benchmarks-history.md);
//! - [`Window::advance`] (on the commit timer, on revocation, on shutdown) pops the
//!   finished prefix and answers the offset to commit: one past the last popped
//!   offset, Kafka's convention for "next to read". An unfinished offset stops it, so
//!   a commit never passes a message that is still in flight.
//!
//! The window is bounded ([`Window::capacity`]): when [`Window::is_full`], the fetch
//! loop stops fetching until a completion and an advance make room, which is the
//! consumer's back-pressure (memory never grows with a stuck message).
//!
//! Each assignment of a partition gets a new [`Generation`]: a completion that
//! arrives after the partition was revoked (and perhaps assigned again) carries the
//! old generation and is ignored, so it can never mark an offset of the new
//! assignment.

use std::collections::VecDeque;

/// Which assignment of a partition an offset belongs to.
pub type Generation = u64;

/// Why an offset could not be tracked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrackError {
    /// The window holds `capacity` offsets; advance first.
    #[error("window full ({0} offsets in flight)")]
    Full(usize),
    /// Offsets must rise within an assignment.
    #[error("offset {offset} is not above the last tracked offset {last}")]
    NotRising {
        /// The offered offset.
        offset: i64,
        /// The highest offset tracked so far.
        last: i64,
    },
}

/// The in-flight offsets of one partition assignment.
#[derive(Debug, Clone)]
pub struct Window {
    generation: Generation,
    capacity: usize,
    /// (offset, finished), in offset order.
    slots: VecDeque<(i64, bool)>,
    /// Slots not finished.
    unfinished: usize,
    last_tracked: Option<i64>,
    /// The offset to commit (one past the last finished prefix), once known.
    committable: Option<i64>,
    /// Last offset handed out by `advance` for committing.
    committed: Option<i64>,
}

impl Window {
    /// An empty window for one assignment.
    pub fn new(generation: Generation, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Window {
            generation,
            capacity,
            slots: VecDeque::with_capacity(capacity),
            unfinished: 0,
            last_tracked: None,
            committable: None,
            committed: None,
        }
    }

    /// The assignment this window belongs to.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// Most offsets in flight at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Offsets tracked and not yet popped by an advance (finished or not).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether the fetch loop must wait before tracking another offset.
    pub fn is_full(&self) -> bool {
        self.slots.len() >= self.capacity
    }

    /// Offsets tracked and not finished.
    pub fn unfinished(&self) -> usize {
        self.unfinished
    }

    /// Adds a fetched offset.
    pub fn track(&mut self, offset: i64) -> Result<(), TrackError> {
        if self.is_full() {
            return Err(TrackError::Full(self.slots.len()));
        }
        if let Some(last) = self.last_tracked
            && offset <= last
        {
            return Err(TrackError::NotRising { offset, last });
        }
        self.slots.push_back((offset, false));
        self.unfinished += 1;
        self.last_tracked = Some(offset);
        Ok(())
    }

    /// Marks an offset finished. Answers false (and changes nothing) for an offset of
    /// another generation, one never tracked, or one already finished.
    pub fn complete(&mut self, generation: Generation, offset: i64) -> bool {
        if generation != self.generation {
            return false;
        }
        let Some(&(first, _)) = self.slots.front() else {
            return false;
        };
        // Where the offset sits if the window has no gap; else search the ring.
        let guess = usize::try_from(offset - first).ok();
        let at = match guess.and_then(|g| self.slots.get(g).map(|s| (g, s.0))) {
            Some((g, o)) if o == offset => Some(g),
            _ => self.slots.binary_search_by_key(&offset, |s| s.0).ok(),
        };
        match at.and_then(|a| self.slots.get_mut(a)) {
            Some(slot) if !slot.1 => {
                slot.1 = true;
                self.unfinished -= 1;
                true
            }
            _ => false,
        }
    }

    /// Pops the finished prefix (making room) without handing out a commit.
    pub fn compact(&mut self) {
        while let Some(&(offset, true)) = self.slots.front() {
            self.slots.pop_front();
            self.committable = Some(offset + 1);
        }
    }

    /// Pops the finished prefix and answers the offset to commit if it moved since
    /// the last call (`None`: nothing new to commit).
    pub fn advance(&mut self) -> Option<i64> {
        self.compact();
        if self.committable != self.committed {
            self.committed = self.committable;
            self.committable
        } else {
            None
        }
    }

    /// The offset a commit now would write (one past the finished prefix), without
    /// popping anything.
    pub fn position(&self) -> Option<i64> {
        let mut pos = self.committable;
        for &(offset, done) in &self.slots {
            if !done {
                break;
            }
            pos = Some(offset + 1);
        }
        pos
    }

    /// Offsets fetched but not yet covered by a commit: from the commit position to
    /// the last tracked offset (gaps included).
    pub fn commit_lag(&self) -> i64 {
        match (self.last_tracked, self.committed) {
            (Some(last), Some(c)) => (last + 1 - c).max(0),
            (Some(last), None) => self.slots.front().map_or(0, |s| last + 1 - s.0),
            _ => 0,
        }
    }

    /// The first offset not yet finished here: the commit position, else the first
    /// tracked offset, else one past the last tracked (`None` before any fetch). What
    /// the broker holds from this offset on waits for this consumer (its lag).
    pub fn waiting_from(&self) -> Option<i64> {
        self.position()
            .or_else(|| self.slots.front().map(|s| s.0))
            .or_else(|| self.last_tracked.map(|l| l + 1))
    }

    /// The lowest unfinished offset, if any (what a commit waits for).
    pub fn oldest_unfinished(&self) -> Option<i64> {
        self.slots.iter().find(|s| !s.1).map(|s| s.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn commits_only_the_finished_prefix() {
        let mut w = Window::new(1, 8);
        for o in [10, 11, 13, 14] {
            w.track(o).unwrap();
        }
        assert!(w.complete(1, 11));
        assert!(w.complete(1, 14));
        assert_eq!(w.advance(), None, "10 is still in flight");
        assert!(w.complete(1, 10));
        assert_eq!(w.commit_lag(), 5, "10..=14 uncommitted");
        assert_eq!(w.advance(), Some(12), "10 and 11 done, 13 not");
        assert_eq!(w.commit_lag(), 3, "12 (a gap), 13, 14");
        assert_eq!(w.advance(), None, "nothing new");
        assert!(w.complete(1, 13));
        assert_eq!(w.advance(), Some(15));
        assert!(w.is_empty());
    }

    #[test]
    fn refuses_stale_duplicate_and_unknown_completions() {
        let mut w = Window::new(7, 4);
        w.track(0).unwrap();
        assert!(!w.complete(6, 0), "another assignment's completion");
        assert!(!w.complete(7, 5), "never tracked");
        assert!(w.complete(7, 0));
        assert!(!w.complete(7, 0), "twice");
        assert_eq!(w.advance(), Some(1));
    }

    #[test]
    fn bounded_and_rising() {
        let mut w = Window::new(1, 2);
        w.track(5).unwrap();
        assert_eq!(
            w.track(5),
            Err(TrackError::NotRising { offset: 5, last: 5 })
        );
        w.track(6).unwrap();
        assert!(w.is_full());
        assert_eq!(w.track(7), Err(TrackError::Full(2)));
        w.complete(1, 5);
        assert!(w.is_full(), "room is made by compact, not by completion");
        w.compact();
        assert!(!w.is_full());
        assert_eq!(w.advance(), Some(6), "compact hands out nothing");
        w.track(7).unwrap();
        assert_eq!(w.oldest_unfinished(), Some(6));
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Fetch the next message; the gap before it (0 = contiguous).
        Fetch(u8),
        /// Complete the k-th unfinished offset (mod their count).
        Complete(usize),
        Advance,
        /// Make room without committing (the fetch loop waiting for room).
        Compact,
        /// Revoke: advance one last time, then a new assignment starts after the
        /// committed offset (what a restarted consumer would read).
        Revoke,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..3).prop_map(Op::Fetch),
            4 => any::<usize>().prop_map(Op::Complete),
            2 => Just(Op::Advance),
            1 => Just(Op::Compact),
            1 => Just(Op::Revoke),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Model: the set of fetched offsets and the set of finished ones. A commit
        /// never passes an unfinished offset of its assignment, never goes back, and
        /// once everything is finished the commit reaches the last fetched offset + 1.
        #[test]
        fn never_commits_past_an_unfinished_offset(ops in proptest::collection::vec(op(), 1..300), cap in 1usize..16) {
            let mut generation = 1;
            let mut w = Window::new(generation, cap);
            let mut next = 0i64;
            let mut fetched: Vec<i64> = Vec::new();
            let mut unfinished: Vec<i64> = Vec::new();
            let mut committed: Option<i64> = None;
            for op in ops {
                match op {
                    Op::Fetch(gap) => {
                        let o = next + i64::from(gap);
                        match w.track(o) {
                            Ok(()) => {
                                fetched.push(o);
                                unfinished.push(o);
                                next = o + 1;
                            }
                            Err(TrackError::Full(n)) => prop_assert_eq!(n, cap),
                            Err(e) => prop_assert!(false, "{e}"),
                        }
                    }
                    Op::Complete(k) => {
                        if !unfinished.is_empty() {
                            let o = unfinished.remove(k % unfinished.len());
                            prop_assert!(w.complete(generation, o));
                            // An old assignment's completion never lands.
                            prop_assert!(!w.complete(generation.wrapping_sub(1), o));
                        }
                    }
                    Op::Compact => w.compact(),
                    Op::Advance | Op::Revoke => {
                        if let Some(c) = w.advance() {
                            if let Some(prev) = committed {
                                prop_assert!(c > prev, "commit went back: {c} after {prev}");
                            }
                            if let Some(&lowest) = unfinished.iter().min() {
                                prop_assert!(c <= lowest, "commit {c} passes unfinished {lowest}");
                            }
                            committed = Some(c);
                        }
                        if matches!(op, Op::Revoke) {
                            // The rest is dropped; a new assignment re-reads from the commit.
                            generation += 1;
                            w = Window::new(generation, cap);
                            next = committed.unwrap_or(0);
                            unfinished.clear();
                            fetched.retain(|&o| committed.is_some_and(|c| o < c));
                        }
                    }
                }
            }
            // Finish everything: the commit must reach past the last fetched offset.
            for o in unfinished.drain(..) {
                prop_assert!(w.complete(generation, o));
            }
            if let Some(c) = w.advance() {
                committed = Some(c);
            }
            if let Some(&last) = fetched.iter().max() {
                prop_assert_eq!(committed, Some(last + 1));
            }
            prop_assert!(w.is_empty());
        }
    }
}
