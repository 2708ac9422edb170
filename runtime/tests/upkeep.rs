//! A process whose metrics nobody scrapes must not keep every histogram sample it
//! records: the recorder's upkeep folds them into the buckets. Without it, this
//! test's 8 M samples stay in memory (64 MB and more).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

/// Resident memory, bytes (Linux).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn histogram_samples_nobody_scrapes_do_not_pile_up() {
    let every = Duration::from_millis(200);
    let _handle = reward_runtime::admin::install_metrics_with_upkeep(every).unwrap();
    let h = metrics::histogram!("reward_test_upkeep_seconds");
    let record = |n: u32| {
        for i in 0..n {
            h.record(f64::from(i % 100) / 1000.0);
        }
    };
    // The allocator's pools settle with the first round.
    record(2_000_000);
    // Time is the subject: ten upkeep periods (2 s) of the upkeep's own clock (it says
    // nothing when it has run), so a thread the machine starves for a while still
    // gets its turn between rounds.
    std::thread::sleep(every * 10);
    let base = rss();
    for _ in 0..4 {
        record(2_000_000);
        // Time is the subject, as above.
        std::thread::sleep(every * 10);
    }
    let grown = rss().saturating_sub(base);
    assert!(
        grown < 32 << 20,
        "resident memory grew {} MB over 8 M histogram samples nobody scraped",
        grown >> 20
    );
}
