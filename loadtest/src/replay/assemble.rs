//! The report of a finished run: the per-second timeline, latencies, SLO verdict and
//! the SDK's and downstream double's counters, assembled from what the run collected and
//! reconciliation found.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use crate::profile::Plan;
use crate::reconcile::Reconciliation;
use crate::setup::Setup;

use super::collect::{Collected, CounterRow, hist};
use super::{Latency, ReplayReport, Second};

/// The downstream double's counters: calls, failed on purpose, answered late after
/// crediting, repeats answered with the first receipt.
pub(super) fn double_counters(
    w: &reward_standins::downstream::DownstreamDouble,
) -> BTreeMap<String, u64> {
    let (calls, failed) = w.counts();
    let (late, repeats) = w.late_and_repeats();
    BTreeMap::from([
        ("calls".to_string(), calls),
        ("failed".to_string(), failed),
        ("late".to_string(), late),
        ("repeats".to_string(), repeats),
    ])
}

/// Credits per second and end-to-end latency, from the ledger's credit times.
struct Credits {
    /// Send → credit of every credit, ms.
    e2e: Histogram<u64>,
    /// The same, per second of the credit.
    per_sec_e2e: Vec<Histogram<u64>>,
    /// Credits per second, per type.
    credited: Vec<BTreeMap<String, u64>>,
    /// The last credit's time, Unix ms (the start when nothing was credited).
    last_credit: i64,
}

fn credits(reconciliation: &Reconciliation, started: i64) -> Credits {
    let mut e2e = hist();
    let mut per_sec_e2e: Vec<Histogram<u64>> = Vec::new();
    let mut credited: Vec<BTreeMap<String, u64>> = Vec::new();
    let mut last_credit = started;
    for (at, delay, ty) in &reconciliation.credit_delays_ms {
        let d = u64::try_from(*delay).unwrap_or(0).max(1);
        let _ = e2e.record(d);
        let sec = usize::try_from((at - started).max(0) / 1000).unwrap_or(0);
        while credited.len() <= sec {
            credited.push(BTreeMap::new());
            per_sec_e2e.push(hist());
        }
        *credited[sec].entry(ty.clone()).or_default() += 1;
        let _ = per_sec_e2e[sec].record(d);
        last_credit = last_credit.max(*at);
    }
    Credits {
        e2e,
        per_sec_e2e,
        credited,
        last_credit,
    }
}

/// Tokens missing per second of their send.
fn missing_by_second(reconciliation: &Reconciliation, started: i64) -> Vec<u64> {
    let mut missing_by_sec: Vec<u64> = Vec::new();
    for at in &reconciliation.tokens_missing_sent_ms {
        let sec = usize::try_from((at - started).max(0) / 1000).unwrap_or(0);
        if missing_by_sec.len() <= sec {
            missing_by_sec.resize(sec + 1, 0);
        }
        missing_by_sec[sec] += 1;
    }
    missing_by_sec
}

/// One row per second, from the first send to the last credit or sample.
fn timeline(
    c: &Collected,
    samples: &[CounterRow],
    credits: &Credits,
    missing_by_sec: &[u64],
) -> Vec<Second> {
    let credited = &credits.credited;
    let per_sec_e2e = &credits.per_sec_e2e;
    let len = credited
        .len()
        .max(c.per_second.len())
        .max(samples.len())
        .max(missing_by_sec.len());
    let mut timeline = Vec::with_capacity(len);
    for t in 0..len {
        let mut s = Second {
            t: t as u64,
            ..Second::default()
        };
        if let Some((sent, refused, h, lag)) = c.per_second.get(t) {
            s.sent = *sent;
            s.refused = *refused;
            s.scheduled = sent + refused;
            if !h.is_empty() {
                s.send_p50_us = h.value_at_quantile(0.5);
                s.send_p99_us = h.value_at_quantile(0.99);
            }
            if !lag.is_empty() {
                s.start_lag_p99_us = lag.value_at_quantile(0.99);
            }
        }
        s.tokens_missing = missing_by_sec.get(t).copied().unwrap_or(0);
        if let (Some(cr), Some(h)) = (credited.get(t), per_sec_e2e.get(t)) {
            s.credited = cr.clone();
            if !h.is_empty() {
                s.e2e_p50_ms = h.value_at_quantile(0.5);
                s.e2e_p99_ms = h.value_at_quantile(0.99);
            }
        }
        if let Some((cons, sdk)) = samples.get(t) {
            add_counters(&mut s, cons, sdk);
        }
        timeline.push(s);
    }
    timeline
}

/// Fills a second's SDK and consumer counters from that second's sample.
fn add_counters(s: &mut Second, cons: &BTreeMap<String, u64>, sdk: &sdk::queue::StatsSnapshot) {
    let g = |k: &str| cons.get(k).copied().unwrap_or(0);
    s.sdk_failovers = sdk.failovers;
    s.sdk_spooled = sdk.spooled;
    s.sdk_retries = sdk.retries;
    s.swept = g(super::children::SWEPT);
    s.sdk_delivered = sdk.delivered;
    s.consumed = g("consumed");
    s.requeued_failed = g("requeued_failed");
    s.requeued_limited = g("requeued_limited");
    s.requeued_fused = g("requeued_fused");
    s.limiter_waits = g("limiter_waits");
    s.dead_lettered = g("dead_lettered");
    s.backlog = sdk.delivered.saturating_sub(s.consumed);
}

/// The figures of each second the SLOs look at.
fn second_figures(timeline: &[Second]) -> Vec<crate::slo::SecondFigures> {
    timeline
        .iter()
        .map(|s| crate::slo::SecondFigures {
            send_p99_us: s.send_p99_us,
            e2e_p99_ms: s.e2e_p99_ms,
            start_lag_p99_us: s.start_lag_p99_us,
            tokens_missing: s.tokens_missing,
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
pub(super) fn build_report(
    plan: &Plan,
    setup: &Setup,
    c: &Collected,
    scheduled: u64,
    shed: u64,
    samples: &[CounterRow],
    sdk_map: BTreeMap<String, u64>,
    aborted: bool,
    consumers: BTreeMap<String, u64>,
    struck: Vec<super::recovery::Struck>,
    reconciliation: Reconciliation,
) -> ReplayReport {
    let started = setup.manifest.started_unix_ms;
    // Credits per second and end-to-end latency from the ledger's credit times.
    let credits = credits(&reconciliation, started);
    let missing_by_sec = missing_by_second(&reconciliation, started);
    let timeline = timeline(c, samples, &credits, &missing_by_sec);
    let span_secs = ((credits.last_credit - started).max(1) as f64) / 1000.0;
    let end_to_end_ms = Latency::of(&credits.e2e);
    let start_lag_us = c.lag.as_ref().map(Latency::of).unwrap_or_default();
    let send_latency_us = c.send.as_ref().map(Latency::of).unwrap_or_default();
    let measured = crate::slo::Measured {
        calls_accepted: c.sent,
        calls_refused: c.refused.values().sum(),
        accepted: reconciliation.sent,
        tokens_missing: reconciliation.tokens_missing,
        send_p99_us: send_latency_us.p99,
        end_to_end_p99_ms: (end_to_end_ms.count > 0).then_some(end_to_end_ms.p99),
        start_lag_p99_us: start_lag_us.p99,
        start_lag_p999_us: start_lag_us.p999,
        shed,
        aborted,
        per_second: second_figures(&timeline),
    };
    let verdict = crate::slo::Verdict::judge(reconciliation.passed(), &plan.slo, &measured);
    let sched_secs = plan.duration_secs.max(0.001);
    let repeat_share = if c.sent > 0 {
        c.repeats as f64 / c.sent as f64
    } else {
        0.0
    };
    let credited = super::recovery::Credited {
        rewards: reconciliation
            .credit_delays_ms
            .iter()
            .map(|(at, delay, _)| {
                (
                    (at - delay - started) as f64 / 1000.0,
                    (at - started) as f64 / 1000.0,
                )
            })
            .collect(),
        complete: reconciliation
            .checks
            .iter()
            .any(|c| c.name == "credited once" && c.pass),
    };
    let fault_verdicts = super::recovery::verdicts(&struck, &timeline, &credited, repeat_share);
    let faults = struck
        .into_iter()
        .map(|s| (s.struck_secs, s.label))
        .collect();
    ReplayReport {
        profile: plan.name.clone(),
        tag: setup.manifest.tag.clone(),
        verdict,
        duration_secs: plan.duration_secs,
        users: plan.users,
        scheduled,
        sent: c.sent,
        repeats: c.repeats,
        refused: c.refused.clone(),
        answered: c.answered.clone(),
        shed,
        send_latency_us,
        call_latency_us: c.call.as_ref().map(Latency::of).unwrap_or_default(),
        start_lag_us,
        end_to_end_ms,
        credited: reconciliation.credited,
        credited_per_sec: reconciliation.credited as f64 / span_secs,
        credited_peak_per_sec: credits
            .credited
            .iter()
            .map(|m| m.values().sum::<u64>())
            .max()
            .unwrap_or(0),
        sent_per_sec: c.sent as f64 / sched_secs,
        span_secs,
        limited: BTreeMap::new(),
        limits: setup.manifest.limits.clone(),
        faults,
        fault_verdicts,
        sdk: sdk_map,
        consumers,
        timeline,
        reconciliation,
        ceilings: None,
        cost: None,
        downstream_double: BTreeMap::new(),
        fault_proxies: BTreeMap::new(),
    }
}

/// For each rate-limited type: its credits per second between its first and its last
/// credit second (both left out, being partial), the seconds that span, and the
/// limit. While the type's backlog lasts this is the fleet's achieved rate.
pub(crate) fn limited_rates(
    limits: &BTreeMap<String, f64>,
    timeline: &[super::Second],
) -> BTreeMap<String, super::LimitedRate> {
    limits
        .iter()
        .map(|(t, &limit)| {
            let per_sec: Vec<u64> = timeline
                .iter()
                .map(|s| s.credited.get(t).copied().unwrap_or(0))
                .collect();
            let first = per_sec.iter().position(|&n| n > 0);
            let last = per_sec.iter().rposition(|&n| n > 0);
            let inner = match (first, last) {
                (Some(a), Some(b)) if b > a + 1 => &per_sec[a + 1..b],
                _ => &[][..],
            };
            let secs = inner.len() as u64;
            let credited: u64 = inner.iter().sum();
            let rate = super::LimitedRate {
                limit,
                per_sec: if secs == 0 {
                    0.0
                } else {
                    credited as f64 / secs as f64
                },
                secs,
            };
            (t.clone(), rate)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(coupons: u64) -> Second {
        Second {
            credited: BTreeMap::from([("coupon".to_string(), coupons), ("cash".to_string(), 7)]),
            ..Second::default()
        }
    }

    #[test]
    fn a_limited_types_rate_leaves_out_its_partial_first_and_last_seconds() {
        let timeline: Vec<Second> = [0, 3, 20, 21, 19, 20, 4, 0]
            .into_iter()
            .map(second)
            .collect();
        let limits = BTreeMap::from([("coupon".to_string(), 20.0), ("gift".to_string(), 5.0)]);
        let r = limited_rates(&limits, &timeline);
        assert_eq!(r["coupon"].secs, 4);
        assert!((r["coupon"].per_sec - 20.0).abs() < 1e-9);
        assert_eq!(r["gift"].secs, 0, "a type never credited has no span");
        assert!((r["gift"].limit - 5.0).abs() < 1e-9);
    }
}
