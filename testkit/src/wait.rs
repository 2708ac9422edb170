//! Waiting for a condition instead of sleeping: [`eventually`] asks a probe again and
//! again, with a short pause that grows from 10 ms to 200 ms, and returns what the
//! probe found the moment it succeeds. The timeout only bounds a failure, so it can be
//! generous (tens of seconds) at no cost to a passing test, on a quiet machine or a
//! busy one.
//!
//! A probe answers a [`Probe`]: `bool` (the condition holds or not), `Option<T>` (the
//! value once it is there) or `Result<T, E>` (the value, or why not yet: the last of
//! these reasons is in the failure message).
//!
//! A fixed sleep stays where time itself is the subject (nothing more may arrive
//! within a window, a lease or a TTL must pass, a rate is measured over a window).

use std::fmt::Display;
use std::time::Duration;

/// The first pause between two tries.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause between two tries.
const MAX_PAUSE: Duration = Duration::from_millis(200);

/// What a probe answers: the awaited value, or why it is not there yet.
pub trait Probe {
    /// What the probe yields once it succeeds.
    type Value;
    /// The value, or the reason the condition does not hold yet.
    fn check(self) -> Result<Self::Value, String>;
}

impl Probe for bool {
    type Value = ();
    fn check(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err("the condition did not hold".into())
        }
    }
}

impl<T> Probe for Option<T> {
    type Value = T;
    fn check(self) -> Result<T, String> {
        self.ok_or_else(|| "nothing yet (None)".into())
    }
}

impl<T, E: Display> Probe for Result<T, E> {
    type Value = T;
    fn check(self) -> Result<T, String> {
        self.map_err(|e| e.to_string())
    }
}

/// A wait that ran out of time: what was awaited, for how long, and the probe's last
/// answer. Its `Display` is the message [`eventually`] panics with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedOut {
    /// What was awaited.
    pub what: String,
    /// The timeout.
    pub after: Duration,
    /// How many times the probe answered.
    pub tries: u32,
    /// The probe's last failure (empty when it never answered).
    pub last: String,
    /// Whether the last try was still running at the deadline (and was dropped).
    pub cut: bool,
}

impl Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "timed out after {:?} waiting for {} ({} tries); last: {}",
            self.after,
            self.what,
            self.tries,
            if self.last.is_empty() {
                "no answer"
            } else {
                &self.last
            }
        )?;
        if self.cut {
            write!(f, "; the next try was still running at the deadline")?;
        }
        Ok(())
    }
}

impl std::error::Error for TimedOut {}

/// Calls `probe` until it succeeds and returns its value; panics with what was awaited
/// and the probe's last failure once `timeout` has passed. A try still running at the
/// deadline is dropped. Pauses between tries grow from 10 ms to 200 ms, on tokio's
/// clock (a paused test clock moves them at once).
///
/// ```
/// use std::time::Duration;
/// use reward_testkit::eventually;
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let mut calls = 0;
/// let value = eventually(Duration::from_secs(30), "the third call", async || {
///     calls += 1;
///     if calls == 3 { Ok(calls * 10) } else { Err(format!("call {calls}: not yet")) }
/// })
/// .await;
/// assert_eq!((value, calls), (30, 3));
/// # });
/// ```
pub async fn eventually<P: Probe>(
    timeout: Duration,
    what: &str,
    probe: impl AsyncFnMut() -> P,
) -> P::Value {
    match try_eventually(timeout, what, probe).await {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

/// [`eventually`] that answers a [`TimedOut`] instead of panicking, for a caller that
/// goes on (tries another port, reports the failure its own way).
pub async fn try_eventually<P: Probe>(
    timeout: Duration,
    what: &str,
    mut probe: impl AsyncFnMut() -> P,
) -> Result<P::Value, TimedOut> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = FIRST_PAUSE;
    let mut tries = 0;
    let mut last = String::new();
    let mut cut = false;
    loop {
        match tokio::time::timeout_at(deadline, probe()).await {
            Ok(answer) => {
                tries += 1;
                match answer.check() {
                    Ok(v) => return Ok(v),
                    Err(why) => last = why,
                }
            }
            Err(_) => {
                cut = true;
                break;
            }
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break;
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
    Err(TimedOut {
        what: what.to_string(),
        after: timeout,
        tries,
        last,
        cut,
    })
}

/// [`eventually`] for synchronous code (a `Drop`, a plain `#[test]`, a blocking task):
/// calls `probe` on this thread, pausing it between tries. A try is never cut short.
///
/// ```
/// use std::time::Duration;
/// use reward_testkit::eventually_blocking;
///
/// let mut calls = 0;
/// let third = eventually_blocking(Duration::from_secs(30), "the third call", || {
///     calls += 1;
///     (calls == 3).then_some(calls)
/// });
/// assert_eq!(third, 3);
/// ```
pub fn eventually_blocking<P: Probe>(
    timeout: Duration,
    what: &str,
    mut probe: impl FnMut() -> P,
) -> P::Value {
    let deadline = std::time::Instant::now() + timeout;
    let mut pause = FIRST_PAUSE;
    let mut tries = 0;
    loop {
        tries += 1;
        let last = match probe().check() {
            Ok(v) => return v,
            Err(why) => why,
        };
        let now = std::time::Instant::now();
        if now >= deadline {
            let e = TimedOut {
                what: what.to_string(),
                after: timeout,
                tries,
                last,
                cut: false,
            };
            panic!("{e}");
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[tokio::test(start_paused = true)]
    async fn eventually_returns_as_soon_as_the_probe_succeeds() {
        let start = Instant::now();
        let mut calls = 0;
        let got = eventually(Duration::from_secs(60), "the third call", async || {
            calls += 1;
            if calls == 3 {
                Ok(calls)
            } else {
                Err(format!("call {calls}"))
            }
        })
        .await;
        assert_eq!((got, calls), (3, 3));
        // Two pauses, 10 ms then 20 ms, on the paused clock: nowhere near the timeout.
        assert_eq!(start.elapsed(), Duration::from_millis(30));
    }

    #[tokio::test(start_paused = true)]
    async fn eventually_takes_bool_and_option_probes() {
        let mut n = 0;
        eventually(Duration::from_secs(1), "n at 2", async || {
            n += 1;
            n >= 2
        })
        .await;
        let v = eventually(Duration::from_secs(1), "n at 4", async || {
            n += 1;
            (n >= 4).then_some(n)
        })
        .await;
        assert_eq!(v, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn eventually_fails_with_the_last_error_after_the_timeout() {
        let start = Instant::now();
        let mut calls = 0u32;
        let e = try_eventually(Duration::from_secs(5), "a record", async || {
            calls += 1;
            Err::<(), _>(format!("call {calls} found none"))
        })
        .await
        .unwrap_err();
        // Not a moment before the timeout, nor much after: the last pause is cut to it.
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert_eq!(e.tries, calls);
        assert_eq!(e.last, format!("call {calls} found none"));
        assert!(!e.cut);
        let msg = e.to_string();
        assert!(msg.contains("waiting for a record"), "{msg}");
        assert!(
            msg.contains(&format!("last: call {calls} found none")),
            "{msg}"
        );
        // 10, 20, 40, 80, 160 ms, then 200 ms pauses: about 30 tries in 5 s.
        assert!((20..40).contains(&calls), "{calls} tries");
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "waiting for the flag (")]
    async fn eventually_panics_naming_what_it_awaited() {
        eventually(Duration::from_secs(2), "the flag", async || false).await;
    }

    #[tokio::test(start_paused = true)]
    async fn eventually_drops_a_try_still_running_at_the_deadline() {
        let start = Instant::now();
        let mut calls = 0;
        let e = try_eventually(Duration::from_secs(3), "a hung call", async || {
            calls += 1;
            if calls == 1 {
                Err("refused")
            } else {
                std::future::pending::<Result<(), &str>>().await
            }
        })
        .await
        .unwrap_err();
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        assert_eq!((e.tries, e.last.as_str(), e.cut), (1, "refused", true));
        assert!(e.to_string().contains("still running"), "{e}");
    }

    #[test]
    fn eventually_blocking_returns_early_and_fails_with_the_last_error() {
        let mut calls = 0;
        let got = eventually_blocking(Duration::from_secs(60), "the third call", || {
            calls += 1;
            if calls == 3 { Ok(calls) } else { Err("no") }
        });
        assert_eq!(got, 3);
        let failed = std::panic::catch_unwind(|| {
            let mut n = 0;
            eventually_blocking(Duration::from_millis(50), "never", || {
                n += 1;
                Err::<(), _>(format!("try {n}"))
            })
        })
        .unwrap_err();
        let msg = failed.downcast_ref::<String>().unwrap();
        assert!(msg.contains("waiting for never"), "{msg}");
        assert!(msg.contains("last: try "), "{msg}");
    }
}
