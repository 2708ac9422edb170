//! Unit tests of the pipeline's own helpers (the GrantBatch retry wait).

use super::settle::{GRANT_ATTEMPTS, grant_backoff};

#[test]
fn grant_retries_wait_with_jitter_within_bounds() {
    for attempt in 0..GRANT_ATTEMPTS {
        let base = 500 * u64::from(attempt + 1);
        let waits: Vec<u128> = (0..200)
            .map(|_| grant_backoff(attempt).as_millis())
            .collect();
        let (lo, hi) = (u128::from(base / 2), u128::from(base * 3 / 2));
        assert!(waits.iter().all(|w| (lo..=hi).contains(w)), "{waits:?}");
        assert!(waits.iter().any(|w| *w != waits[0]), "no jitter");
    }
}
