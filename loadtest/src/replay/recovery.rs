//! A verdict per fault: when it struck, when the broken part was back, how long the
//! pipeline took to catch up, and what the fault cost on the way.
//!
//! **Recovered** means the pipeline has paid the fault's debt: every reward sent
//! before the broken part was back has been credited. The time to recover runs from
//! the strike to the credit of the last of them (from the ledger's credit times, per
//! reward). A fault that only slows things (a slow downstream, a paused Redis)
//! recovers once the pipeline has worked off what piled up; one whose events die
//! until the sweeper finds their tokens (a killed SDK host) recovers when the
//! sweeper has granted them, a grace period later. Rewards lost with a killed host
//! (never stored) have no credit to wait for and are left out; a run with a reward
//! missing says "not recovered". Even without a fault the figure is the slowest
//! reward's end-to-end time, so read it beside the run's end-to-end p99.
//!
//! The **backlog** (rewards accepted so far, repeats left out, minus rewards credited
//! so far) is given at the strike and at its peak until recovery.
//!
//! **Cost** is what the run's counters gained from the start of the second the fault
//! struck to the end of the second it recovered (or of the run); each second's
//! counters are sampled at its start: SDK send retries, failovers and spooled events,
//! consumer requeues (failed, over rate, fused), the sweeper's grants, and sends
//! refused. Faults that overlap share their seconds, so each sees the other's cost.

use serde::Serialize;

use super::Second;

/// One injected fault, as the injector saw it.
#[derive(Debug, Clone, Serialize)]
pub struct Struck {
    /// What it was.
    pub label: String,
    /// Seconds after sending began when it struck.
    pub struck_secs: f64,
    /// When the broken part was back (the injection ended).
    pub back_secs: f64,
    /// The injection failed (the label says why).
    pub failed: bool,
}

/// The verdict on one fault.
#[derive(Debug, Clone, Serialize)]
pub struct FaultVerdict {
    /// The fault as injected.
    #[serde(flatten)]
    pub fault: Struck,
    /// Seconds from the strike until every reward sent before the part was back was
    /// credited; `None`: a reward is missing.
    pub recovered_after_secs: Option<f64>,
    /// The backlog when it struck and its peak until recovery, rewards.
    pub backlog_at_strike: u64,
    /// Peak backlog until recovery.
    pub backlog_peak: u64,
    /// Counters gained from the strike to the recovery (or the end of the run).
    pub sdk_retries: u64,
    /// SDK events failed over to the other broker.
    pub sdk_failovers: u64,
    /// SDK events spooled to disk.
    pub sdk_spooled: u64,
    /// Consumer requeues (failed, over rate, fused).
    pub requeued: u64,
    /// Stored tokens the sweeper granted.
    pub swept: u64,
    /// Sends refused.
    pub refused: u64,
}

impl FaultVerdict {
    /// One line for the terminal.
    pub fn line(&self) -> String {
        let f = &self.fault;
        format!(
            "  {:>6.1} s  {:<58} back after {:>5.1} s, {}; backlog {} -> peak {}; cost: {} retries, {} failovers, {} spooled, {} requeued, {} swept, {} refused",
            f.struck_secs,
            f.label,
            f.back_secs - f.struck_secs,
            match self.recovered_after_secs {
                Some(r) => format!("recovered after {r:.0} s"),
                None => "NOT recovered within the run".into(),
            },
            self.backlog_at_strike,
            self.backlog_peak,
            self.sdk_retries,
            self.sdk_failovers,
            self.sdk_spooled,
            self.requeued,
            self.swept,
            self.refused
        )
    }
}

/// What the ledger says about the run's credits, for the verdicts.
#[derive(Debug, Clone, Default)]
pub struct Credited {
    /// Every credited reward: (sent, credited), seconds after sending began.
    pub rewards: Vec<(f64, f64)>,
    /// No sent reward is missing from the ledger (lost-with-host ones aside).
    pub complete: bool,
}

/// The verdicts of `struck` over the run's `timeline` and `credited` rewards;
/// `repeat_share` is the share of accepted sends that repeated an earlier trade
/// number (they credit nothing new).
pub fn verdicts(
    struck: &[Struck],
    timeline: &[Second],
    credited: &Credited,
    repeat_share: f64,
) -> Vec<FaultVerdict> {
    // Backlog at the end of each second.
    let keep = (1.0 - repeat_share).clamp(0.0, 1.0);
    let mut offered = 0.0;
    let mut done = 0u64;
    let backlog: Vec<u64> = timeline
        .iter()
        .map(|s| {
            offered += s.sent as f64 * keep;
            done += s.credited.values().sum::<u64>();
            (offered - done as f64).max(0.0).round() as u64
        })
        .collect();
    struck
        .iter()
        .map(|f| verdict(f, timeline, &backlog, credited))
        .collect()
}

fn verdict(f: &Struck, timeline: &[Second], backlog: &[u64], credited: &Credited) -> FaultVerdict {
    let sec = |x: f64| usize::try_from(x.max(0.0) as u64).unwrap_or(usize::MAX);
    let at = sec(f.struck_secs).min(backlog.len().saturating_sub(1));
    // The backlog at the strike: at the end of the second before it.
    let base = at
        .checked_sub(1)
        .and_then(|b| backlog.get(b).copied())
        .unwrap_or(0);
    // The credit of the last reward sent before the part was back.
    let recovered_at = credited.complete.then(|| {
        credited
            .rewards
            .iter()
            .filter(|(sent, _)| *sent <= f.back_secs)
            .map(|(_, at)| *at)
            .fold(f.back_secs, f64::max)
    });
    let last = backlog.len().saturating_sub(1);
    let end = recovered_at.map_or(last, |r| sec(r).min(last));
    // Counters are sampled at the start of each second: the gain over seconds
    // at..=end is the sample of end + 1 (or the last) minus the sample of at.
    let after = (end + 1).min(last);
    let peak = backlog
        .get(at..=end.max(at))
        .and_then(|b| b.iter().max().copied())
        .unwrap_or(base)
        .max(base);
    let gained = |g: fn(&Second) -> u64| match (timeline.get(at), timeline.get(after)) {
        (Some(a), Some(b)) => g(b).saturating_sub(g(a)),
        _ => 0,
    };
    let refused = timeline
        .get(at..=end.max(at).min(timeline.len().saturating_sub(1)))
        .map(|s| s.iter().map(|x| x.refused).sum())
        .unwrap_or(0);
    FaultVerdict {
        fault: f.clone(),
        recovered_after_secs: recovered_at.map(|r| (r - f.struck_secs).max(0.0)),
        backlog_at_strike: base,
        backlog_peak: peak,
        sdk_retries: gained(|s| s.sdk_retries),
        sdk_failovers: gained(|s| s.sdk_failovers),
        sdk_spooled: gained(|s| s.sdk_spooled),
        requeued: gained(|s| s.requeued_failed + s.requeued_limited + s.requeued_fused),
        swept: gained(|s| s.swept),
        refused,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn second(t: u64, sent: u64, credited: u64, spooled: u64, swept: u64) -> Second {
        Second {
            t,
            sent,
            credited: [("cash".to_string(), credited)].into(),
            sdk_spooled: spooled,
            swept,
            ..Second::default()
        }
    }

    fn struck(at: f64, back: f64) -> Struck {
        Struck {
            label: "x".into(),
            struck_secs: at,
            back_secs: back,
            failed: false,
        }
    }

    /// 100/s offered; credits stop in seconds 5..8 (100 spooled in each), then run
    /// at 200/s until caught up at the end of second 10. Counters are sampled at the
    /// start of each second.
    fn outage() -> Vec<Second> {
        let mut tl = Vec::new();
        let mut spooled = 0;
        for t in 0..20u64 {
            let credited = match t {
                5..=7 => 0,
                8..=10 => 200,
                _ => 100,
            };
            tl.push(second(t, 100, credited, spooled, 0));
            if (5..=7).contains(&t) {
                spooled += 100;
            }
        }
        tl
    }

    #[test]
    fn recovery_is_the_credit_of_the_last_reward_sent_before_the_part_was_back() {
        let credited = Credited {
            rewards: vec![
                (1.0, 1.5),
                (5.5, 9.0),
                (7.9, 10.8),
                (8.5, 8.9),
                (12.0, 12.2),
            ],
            complete: true,
        };
        let v = verdicts(&[struck(5.2, 8.0)], &outage(), &credited, 0.0);
        assert_eq!(v.len(), 1);
        // The reward sent at 7.9 s (before the part was back at 8.0) credited at 10.8.
        assert_eq!(v[0].recovered_after_secs, Some(10.8 - 5.2));
        // Backlog: 0 until 4; 100, 200, 300 in 5..7; 200, 100, 0 in 8..10.
        assert_eq!((v[0].backlog_at_strike, v[0].backlog_peak), (0, 300));
        assert_eq!(v[0].sdk_spooled, 300);
        assert!(
            v[0].line().contains("recovered after 6 s"),
            "{}",
            v[0].line()
        );
    }

    #[test]
    fn a_run_with_a_reward_missing_is_not_recovered() {
        let credited = Credited {
            rewards: vec![(1.0, 1.5)],
            complete: false,
        };
        let v = verdicts(&[struck(2.0, 3.0)], &outage(), &credited, 0.0);
        assert_eq!(v[0].recovered_after_secs, None);
        assert!(v[0].line().contains("NOT recovered"));
        // The cost runs to the end of the run.
        assert_eq!(v[0].sdk_spooled, 300);
    }

    #[test]
    fn a_fault_with_nothing_in_flight_recovers_when_the_part_is_back() {
        let credited = Credited {
            rewards: vec![(1.0, 1.5)],
            complete: true,
        };
        let v = verdicts(&[struck(4.0, 6.5)], &outage(), &credited, 0.0);
        assert_eq!(v[0].recovered_after_secs, Some(2.5));
    }

    #[test]
    fn repeats_do_not_count_as_backlog() {
        // 10 % of sends repeat a trade number: 100 sent, 90 credited per second.
        let tl: Vec<Second> = (0..30).map(|t| second(t, 100, 90, 0, 0)).collect();
        let none = Credited {
            rewards: Vec::new(),
            complete: true,
        };
        let v = verdicts(&[struck(10.0, 10.0)], &tl, &none, 0.1);
        assert_eq!((v[0].backlog_at_strike, v[0].backlog_peak), (0, 0));
        let v = verdicts(&[struck(10.0, 10.0)], &tl, &none, 0.0);
        assert_eq!((v[0].backlog_at_strike, v[0].backlog_peak), (100, 110));
    }

    #[test]
    fn sweeps_are_counted_and_an_empty_timeline_is_no_panic() {
        let tl: Vec<Second> = (0..5).map(|t| second(t, 10, 10, 0, t * 3)).collect();
        let credited = Credited {
            rewards: vec![(0.5, 2.5)],
            complete: true,
        };
        let v = verdicts(&[struck(1.0, 2.0)], &tl, &credited, 0.0);
        assert_eq!(v[0].swept, 6);
        let v = verdicts(&[struck(1.0, 2.0)], &[], &credited, 0.0);
        assert_eq!(v[0].swept, 0);
        assert_eq!(v[0].refused, 0);
    }
}
