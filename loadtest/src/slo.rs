//! Service-level verdicts of a replay, beside the money reconciliation.
//!
//! A replay can move every cent correctly and still fail its users: tokens that never
//! reached the store (the user cannot see or withdraw the reward), a `send_reward`
//! that answers in seconds, credits that arrive minutes late. So every replay is
//! judged three ways, and the headline says all three:
//!
//! | verdict | from | fails when |
//! | --- | --- | --- |
//! | money | [`crate::reconcile`] | any reconciliation check fails |
//! | SLOs | this module | a target below is missed |
//! | validity | the generator's own timing | the load tester could not keep to the schedule |
//!
//! The targets ([`Targets`]) come from the profile's `[slo]` table, with the defaults
//! below, and `loadtest replay --slo NAME=VALUE` overrides one for a run (`off` turns a
//! target off; the validity bound can be changed, not turned off):
//!
//! | name | default | measures |
//! | --- | --- | --- |
//! | `accepted` | 0.99 | share of `send_reward` calls the SDK accepted (the rest refused: back-pressure, closed, ...); fails when nothing was accepted |
//! | `tokens_stored` | 0.999 | share of accepted rewards whose token is in the store at the end (read from Redis) |
//! | `send_p99_ms` | 50 | `send_reward` p99, from each request's intended start (the source design's budget) |
//! | `end_to_end_p99_ms` | per profile (rain: 10 000) | send to credit, p99 |
//! | `start_lag_p99_ms` | 100 | validity: the generator's start lag p99 (and its p99.9 within 5 times that) |
//!
//! A run is **invalid** when the generator's start lag p99 is over its bound (or its
//! p99.9 over five times the bound: a tail of very late starts), when it
//! shed arrivals (too many in flight), or when it stopped the schedule early because
//! it fell more than [`ABORT_LAG`] behind: its latency figures then describe the load
//! tester, not the pipeline. An invalid run is never reported as passed.
//!
//! Exit status of `loadtest replay`: 0 all passed; 1 money failed (or the run
//! failed); 3 money passed, an SLO failed; 4 money passed, the run was invalid.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A request that starts this late stops the schedule: the run is invalid anyway, and
/// sending the rest would only take longer.
pub const ABORT_LAG: Duration = Duration::from_secs(5);

/// Exit status when money passed and an SLO failed.
pub const EXIT_SLO_FAILED: u8 = 3;
/// Exit status when money passed and the run was invalid.
pub const EXIT_INVALID: u8 = 4;

/// The targets a run is judged against; `None` is off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Targets {
    /// Least share (0..=1) of `send_reward` calls accepted.
    pub accepted: Option<f64>,
    /// Least share (0..=1) of accepted rewards whose token is in the store at the end.
    pub tokens_stored: Option<f64>,
    /// Highest `send_reward` p99, ms, from intended start.
    pub send_p99_ms: Option<f64>,
    /// Highest end-to-end (send to credit) p99, ms.
    pub end_to_end_p99_ms: Option<f64>,
    /// Highest generator start lag p99, ms (validity).
    pub start_lag_p99_ms: f64,
}

impl Default for Targets {
    fn default() -> Self {
        Self {
            accepted: Some(0.99),
            tokens_stored: Some(0.999),
            send_p99_ms: Some(50.0),
            end_to_end_p99_ms: Some(10_000.0),
            start_lag_p99_ms: 100.0,
        }
    }
}

/// A bad `--slo` or `[slo]` setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--slo {0}")]
pub struct BadTarget(pub String);

impl Targets {
    /// The names `--slo` takes.
    pub const NAMES: [&'static str; 5] = [
        "accepted",
        "tokens_stored",
        "send_p99_ms",
        "end_to_end_p99_ms",
        "start_lag_p99_ms",
    ];

    /// Checks ranges: shares in (0, 1], times positive and finite.
    pub fn check(&self) -> Result<(), BadTarget> {
        for (name, share) in [
            ("accepted", self.accepted),
            ("tokens_stored", self.tokens_stored),
        ] {
            if let Some(s) = share
                && !(s > 0.0 && s <= 1.0)
            {
                return Err(BadTarget(format!("{name}={s}: a share in (0, 1]")));
            }
        }
        for (name, v) in [
            ("send_p99_ms", self.send_p99_ms),
            ("end_to_end_p99_ms", self.end_to_end_p99_ms),
            ("start_lag_p99_ms", Some(self.start_lag_p99_ms)),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Err(BadTarget(format!("{name}={v}: a positive number of ms")));
            }
        }
        Ok(())
    }

    /// Applies one `NAME=VALUE` override (`VALUE` a number, or `off`).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), BadTarget> {
        let num = || -> Result<f64, BadTarget> {
            value
                .parse::<f64>()
                .map_err(|_| BadTarget(format!("{name}={value}: not a number (or `off`)")))
        };
        let off = value == "off";
        let opt = || if off { Ok(None) } else { num().map(Some) };
        match name {
            "accepted" => self.accepted = opt()?,
            "tokens_stored" => self.tokens_stored = opt()?,
            "send_p99_ms" => self.send_p99_ms = opt()?,
            "end_to_end_p99_ms" => self.end_to_end_p99_ms = opt()?,
            "start_lag_p99_ms" if off => {
                return Err(BadTarget(
                    "start_lag_p99_ms cannot be off: it decides whether the run measured the pipeline at all".into(),
                ));
            }
            "start_lag_p99_ms" => self.start_lag_p99_ms = num()?,
            _ => {
                return Err(BadTarget(format!(
                    "{name}: unknown (known: {})",
                    Self::NAMES.join(", ")
                )));
            }
        }
        self.check()
    }
}

/// What a run measured, for the verdicts.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// `send_reward` calls the SDK accepted (repeats included).
    pub calls_accepted: u64,
    /// `send_reward` calls it refused.
    pub calls_refused: u64,
    /// Distinct rewards accepted (each expects its token).
    pub accepted: u64,
    /// Of them, tokens not in the store at the end.
    pub tokens_missing: u64,
    /// `send_reward` p99 from intended start, µs.
    pub send_p99_us: u64,
    /// End-to-end p99, ms (`None`: nothing was credited).
    pub end_to_end_p99_ms: Option<u64>,
    /// The generator's start lag p99, µs.
    pub start_lag_p99_us: u64,
    /// … p99.9.
    pub start_lag_p999_us: u64,
    /// Arrivals shed (too many in flight).
    pub shed: u64,
    /// Whether the schedule was stopped early (a start lag over [`ABORT_LAG`]).
    pub aborted: bool,
    /// Per second of the run.
    pub per_second: Vec<SecondFigures>,
}

/// One second's figures, for marking where an SLO was broken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SecondFigures {
    /// `send_reward` p99 of the arrivals due in it, µs.
    pub send_p99_us: u64,
    /// End-to-end p99 of the credits made in it, ms.
    pub e2e_p99_ms: u64,
    /// The generator's start lag p99 of its arrivals, µs.
    pub start_lag_p99_us: u64,
    /// Tokens missing among the rewards sent in it.
    pub tokens_missing: u64,
}

/// One SLO's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct SloCheck {
    /// The target's name (as `--slo` takes it).
    pub name: String,
    /// The target, readable (`>= 99.9 %`, `<= 50 ms`).
    pub target: String,
    /// What the run measured, readable.
    pub actual: String,
    /// Whether the target was met.
    pub pass: bool,
    /// Seconds of the run where it was broken (for the timeline).
    pub broken_secs: Vec<u64>,
}

/// The three verdicts.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// The reconciliation passed.
    pub money: bool,
    /// Every SLO that is on was met.
    pub slo: bool,
    /// The generator kept to its schedule.
    pub valid: bool,
    /// Why the run is invalid (empty when valid).
    pub invalid_reasons: Vec<String>,
    /// Each SLO (targets that are off are left out).
    pub checks: Vec<SloCheck>,
    /// The targets used.
    pub targets: Targets,
    /// One line: all three verdicts.
    pub headline: String,
}

impl Verdict {
    /// Judges a run.
    pub fn judge(money: bool, t: &Targets, m: &Measured) -> Self {
        let mut checks = Vec::new();
        if let Some(min) = t.accepted {
            checks.push(accepted_check(min, m));
        }
        if let Some(min) = t.tokens_stored {
            checks.push(tokens_stored_check(min, m));
        }
        if let Some(max) = t.send_p99_ms {
            checks.push(send_p99_check(max, m));
        }
        if let Some(max) = t.end_to_end_p99_ms {
            checks.push(end_to_end_check(max, m));
        }
        let invalid_reasons = invalidity(t, m);
        let slo = checks.iter().all(|c| c.pass);
        let valid = invalid_reasons.is_empty();
        let headline = headline(money, slo, valid, &checks);
        Self {
            money,
            slo,
            valid,
            invalid_reasons,
            checks,
            targets: t.clone(),
            headline,
        }
    }

    /// Everything passed and the run was valid.
    pub fn passed(&self) -> bool {
        self.money && self.slo && self.valid
    }

    /// The process exit status for this verdict (see the module doc).
    pub fn exit_code(&self) -> u8 {
        if !self.money {
            1
        } else if !self.valid {
            EXIT_INVALID
        } else if !self.slo {
            EXIT_SLO_FAILED
        } else {
            0
        }
    }

    /// The SLO table as text.
    pub fn table(&self) -> String {
        let mut s = format!("{:<18} {:<6} {:<14} actual\n", "SLO", "result", "target");
        for c in &self.checks {
            s.push_str(&format!(
                "{:<18} {:<6} {:<14} {}\n",
                c.name,
                if c.pass { "PASS" } else { "FAIL" },
                c.target,
                c.actual
            ));
        }
        for r in &self.invalid_reasons {
            s.push_str(&format!("INVALID: {r}\n"));
        }
        s
    }
}

/// The seconds of the run whose figures `f` says broke an SLO.
fn broken_secs(m: &Measured, f: &dyn Fn(&SecondFigures) -> bool) -> Vec<u64> {
    m.per_second
        .iter()
        .enumerate()
        .filter(|(_, s)| f(s))
        .map(|(i, _)| i as u64)
        .collect()
}

/// `accepted`: the share of `send_reward` calls accepted is at least `min`, and some
/// call was.
fn accepted_check(min: f64, m: &Measured) -> SloCheck {
    let calls = m.calls_accepted + m.calls_refused;
    let share = if calls == 0 {
        0.0
    } else {
        m.calls_accepted as f64 / calls as f64
    };
    SloCheck {
        name: "accepted".into(),
        target: format!(">= {} %", pct(min)),
        actual: format!(
            "{} % ({} of {} calls refused)",
            pct(share),
            m.calls_refused,
            calls
        ),
        pass: m.calls_accepted > 0 && share >= min,
        broken_secs: Vec::new(),
    }
}

/// `tokens_stored`: the share of accepted rewards whose token is in the store is at
/// least `min`.
fn tokens_stored_check(min: f64, m: &Measured) -> SloCheck {
    let share = if m.accepted == 0 {
        1.0
    } else {
        (m.accepted - m.tokens_missing.min(m.accepted)) as f64 / m.accepted as f64
    };
    SloCheck {
        name: "tokens_stored".into(),
        target: format!(">= {} %", pct(min)),
        actual: format!(
            "{} % ({} of {} missing)",
            pct(share),
            m.tokens_missing,
            m.accepted
        ),
        pass: share >= min,
        broken_secs: broken_secs(m, &|s| s.tokens_missing > 0),
    }
}

/// `send_p99_ms`: the `send_reward` p99 is at most `max` ms.
fn send_p99_check(max: f64, m: &Measured) -> SloCheck {
    let ms = m.send_p99_us as f64 / 1000.0;
    SloCheck {
        name: "send_p99_ms".into(),
        target: format!("<= {max} ms"),
        actual: format!("{ms:.1} ms"),
        pass: ms <= max,
        broken_secs: broken_secs(m, &|s| s.send_p99_us as f64 / 1000.0 > max),
    }
}

/// `end_to_end_p99_ms`: the send-to-credit p99 is at most `max` ms (fails when
/// nothing was credited).
fn end_to_end_check(max: f64, m: &Measured) -> SloCheck {
    let (actual, pass) = match m.end_to_end_p99_ms {
        Some(v) => (format!("{v} ms"), v as f64 <= max),
        None => ("nothing credited".to_string(), false),
    };
    SloCheck {
        name: "end_to_end_p99_ms".into(),
        target: format!("<= {max} ms"),
        actual,
        pass,
        broken_secs: broken_secs(m, &|s| s.e2e_p99_ms as f64 > max),
    }
}

/// Why the run is invalid: the generator's start lag over its bounds, arrivals shed,
/// the schedule stopped early. Empty when the run is valid.
fn invalidity(t: &Targets, m: &Measured) -> Vec<String> {
    let mut invalid_reasons = Vec::new();
    let lag_ms = m.start_lag_p99_us as f64 / 1000.0;
    if lag_ms > t.start_lag_p99_ms {
        invalid_reasons.push(format!(
            "the generator's start lag p99 was {lag_ms:.1} ms (bound {} ms): the machine could not keep to the schedule",
            t.start_lag_p99_ms
        ));
    }
    let lag_999_ms = m.start_lag_p999_us as f64 / 1000.0;
    if lag_999_ms > 5.0 * t.start_lag_p99_ms {
        invalid_reasons.push(format!(
            "the generator's start lag p99.9 was {lag_999_ms:.1} ms (bound 5 x {} ms): a tail of requests started far behind the schedule",
            t.start_lag_p99_ms
        ));
    }
    if m.shed > 0 {
        invalid_reasons.push(format!(
            "{} arrivals were shed (too many requests in flight)",
            m.shed
        ));
    }
    if m.aborted {
        invalid_reasons.push(format!(
            "the schedule was stopped early: a request started more than {} s late",
            ABORT_LAG.as_secs()
        ));
    }
    invalid_reasons
}

/// The one-line headline: all three verdicts, and each SLO that failed.
fn headline(money: bool, slo: bool, valid: bool, checks: &[SloCheck]) -> String {
    let broken: Vec<String> = checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| format!("{} {} (target {})", c.name, c.actual, c.target))
        .collect();
    format!(
        "money {}, SLOs {}{}, run {}",
        if money { "PASS" } else { "FAIL" },
        if slo { "PASS" } else { "FAIL" },
        if broken.is_empty() {
            String::new()
        } else {
            format!(" ({})", broken.join("; "))
        },
        if valid { "VALID" } else { "INVALID" },
    )
}

/// A share as a percentage with enough digits to tell 99.9 from 100.
fn pct(share: f64) -> String {
    let p = share * 100.0;
    if (99.0..100.0).contains(&p) {
        format!("{:.2}", (p * 100.0).floor() / 100.0)
    } else {
        format!("{p:.1}")
    }
}

/// Parses `--slo NAME=VALUE` for clap.
pub fn parse_override(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| {
        format!(
            "{s:?}: expected NAME=VALUE (names: {})",
            Targets::NAMES.join(", ")
        )
    })?;
    let mut probe = Targets::default();
    probe.set(k, v).map_err(|e| e.to_string())?;
    Ok((k.to_string(), v.to_string()))
}

/// Applies overrides in order.
pub fn apply(t: &mut Targets, overrides: &[(String, String)]) -> Result<(), BadTarget> {
    for (k, v) in overrides {
        t.set(k, v)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
