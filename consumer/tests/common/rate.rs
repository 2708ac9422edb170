//! Rates of credit measured from the ledger's own credit times, and the lock that runs
//! the rate tests one at a time.

use std::time::Duration;

/// What the ledger's own credit times say about one user's credits over a window.
pub struct Rate {
    /// Credits per second over the whole window.
    pub per_sec: f64,
    /// Most credits in any 1 s within it (sliding by 50 ms).
    pub peak_1s: usize,
    /// Credits in each whole second of the window (for the failure message).
    pub seconds: Vec<usize>,
}

/// The credits of `user` over the next `secs`, measured from the credit time the
/// ledger stamps on each one, not from when this test process happened to read a
/// balance: on a busy machine the test's own reads can be late, enough to skew a
/// few seconds' sample past the bounds (docs/findings/benchmarks-history.md). The
/// window closes 500 ms before the read, so every credit stamped in it has landed.
pub async fn rate(ledger: &reward_service::downstream::Ledger, user: &str, secs: f64) -> Rate {
    let from = reward_runtime::clock::now_ms();
    // Time is the subject: the window measured, and 500 ms for its last credits to land.
    tokio::time::sleep(Duration::from_secs_f64(secs + 0.5)).await;
    let to = from + (secs * 1000.0) as i64;
    let mut at: Vec<i64> = ledger
        .account(user)
        .await
        .unwrap()
        .credited
        .into_values()
        .filter(|t| (from..to).contains(t))
        .collect();
    at.sort_unstable();
    let mut peak_1s = 0;
    let mut start = from;
    while start + 1000 <= to {
        let n = at
            .iter()
            .filter(|t| (start..start + 1000).contains(*t))
            .count();
        peak_1s = peak_1s.max(n);
        start += 50;
    }
    let seconds = (0..secs as i64)
        .map(|i| {
            let s = from + i * 1000;
            at.iter().filter(|t| (s..s + 1000).contains(*t)).count()
        })
        .collect();
    Rate {
        per_sec: at.len() as f64 / secs,
        peak_1s,
        seconds,
    }
}

/// The rate tests run one at a time: side by side on a busy 2-core machine (debug
/// builds, a CPU hog beside the suite), one consumer crediting one user's coupons
/// falls well short of its 200/s, on the single node and on a cluster, which measures
/// the machine, not the limiter (docs/findings/benchmarks-history.md); alone it holds
/// the limit.
pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static RATES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    RATES.lock().await
}
