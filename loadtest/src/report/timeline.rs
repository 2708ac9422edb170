//! The report page's timeline: its five charts (throughput, send latency, end-to-end
//! latency, failovers and requeues, credits per reward type), built from the run's
//! per-second figures.

use std::collections::BTreeSet;

use super::chart::{Series, chart};
use crate::replay::ReplayReport;

/// The five charts, one after the other.
pub(super) fn timeline_charts(r: &ReplayReport) -> String {
    let mut charts = String::new();
    charts.push_str(&throughput_chart(r));
    charts.push_str(&send_latency_chart(r));
    charts.push_str(&end_to_end_chart(r));
    charts.push_str(&requeue_chart(r));
    charts.push_str(&per_type_chart(r));
    charts
}

/// One figure of every second of the run.
fn col(r: &ReplayReport, f: &dyn Fn(&crate::replay::Second) -> f64) -> Vec<f64> {
    r.timeline.iter().map(f).collect::<Vec<f64>>()
}

/// One running total of every second of the run, as the increase in each second.
fn cum(r: &ReplayReport, f: &dyn Fn(&crate::replay::Second) -> u64) -> Vec<f64> {
    deltas(&r.timeline.iter().map(f).collect::<Vec<u64>>())
}

/// The seconds where the SLO `name` was broken, to shade on its chart.
fn broken(r: &ReplayReport, name: &str) -> Vec<(String, Vec<u64>)> {
    r.verdict
        .checks
        .iter()
        .filter(|c| c.name == name && !c.broken_secs.is_empty())
        .map(|c| (c.name.clone(), c.broken_secs.clone()))
        .collect()
}

/// Sent, credited, refused and tokens missing per second.
fn throughput_chart(r: &ReplayReport) -> String {
    chart(
        "Throughput",
        "rewards/s",
        &[
            Series {
                name: "sent".into(),
                values: col(r, &|s| s.sent as f64),
            },
            Series {
                name: "credited".into(),
                values: col(r, &|s| s.credited.values().sum::<u64>() as f64),
            },
            Series {
                name: "refused".into(),
                values: col(r, &|s| s.refused as f64),
            },
            Series {
                name: "tokens missing".into(),
                values: col(r, &|s| s.tokens_missing as f64),
            },
        ],
        &[],
        &r.faults,
        &broken(r, "tokens_stored"),
    )
}

/// Send latency p50 and p99 and start lag p99, against the send target.
fn send_latency_chart(r: &ReplayReport) -> String {
    chart(
        "Send latency (from intended start)",
        "ms",
        &[
            Series {
                name: "p50".into(),
                values: col(r, &|s| s.send_p50_us as f64 / 1000.0),
            },
            Series {
                name: "p99".into(),
                values: col(r, &|s| s.send_p99_us as f64 / 1000.0),
            },
            Series {
                name: "start lag p99".into(),
                values: col(r, &|s| s.start_lag_p99_us as f64 / 1000.0),
            },
        ],
        &r.verdict
            .targets
            .send_p99_ms
            .map(|t| vec![("send p99 target".to_string(), t)])
            .unwrap_or_default(),
        &r.faults,
        &broken(r, "send_p99_ms"),
    )
}

/// End-to-end latency p50 and p99 by credit second, against its target.
fn end_to_end_chart(r: &ReplayReport) -> String {
    chart(
        "End-to-end latency (send to credit), by credit second",
        "s",
        &[
            Series {
                name: "p50".into(),
                values: col(r, &|s| s.e2e_p50_ms as f64 / 1000.0),
            },
            Series {
                name: "p99".into(),
                values: col(r, &|s| s.e2e_p99_ms as f64 / 1000.0),
            },
        ],
        &r.verdict
            .targets
            .end_to_end_p99_ms
            .map(|t| vec![("end-to-end p99 target".to_string(), t / 1000.0)])
            .unwrap_or_default(),
        &r.faults,
        &broken(r, "end_to_end_p99_ms"),
    )
}

/// The SDK's failovers and spooled events, and the consumers' requeues and dead
/// letters, per second.
fn requeue_chart(r: &ReplayReport) -> String {
    chart(
        "Failovers, spool and requeues",
        "events/s",
        &[
            Series {
                name: "SDK failovers".into(),
                values: cum(r, &|s| s.sdk_failovers),
            },
            Series {
                name: "SDK spooled".into(),
                values: cum(r, &|s| s.sdk_spooled),
            },
            Series {
                name: "requeued: failed".into(),
                values: cum(r, &|s| s.requeued_failed),
            },
            Series {
                name: "requeued: limited".into(),
                values: cum(r, &|s| s.requeued_limited),
            },
            Series {
                name: "requeued: fused".into(),
                values: cum(r, &|s| s.requeued_fused),
            },
            Series {
                name: "dead-lettered".into(),
                values: cum(r, &|s| s.dead_lettered),
            },
        ],
        &[],
        &r.faults,
        &[],
    )
}

/// Credits per second of each reward type, against the type's limit.
fn per_type_chart(r: &ReplayReport) -> String {
    let types: BTreeSet<String> = r
        .timeline
        .iter()
        .flat_map(|s| s.credited.keys().cloned())
        .collect();
    let per_type: Vec<Series> = types
        .iter()
        .map(|t| Series {
            name: format!("{t} credited"),
            values: col(r, &|s| s.credited.get(t).copied().unwrap_or(0) as f64),
        })
        .collect();
    let limits: Vec<(String, f64)> = types
        .iter()
        .filter_map(|t| r.limits.get(t).map(|l| (t.clone(), *l)))
        .collect();
    chart(
        "Credited per reward type against its limit",
        "credits/s",
        &per_type,
        &limits,
        &r.faults,
        &[],
    )
}

fn deltas(v: &[u64]) -> Vec<f64> {
    let mut prev = 0;
    v.iter()
        .map(|&x| {
            let d = x.saturating_sub(prev);
            prev = x.max(prev);
            d as f64
        })
        .collect()
}
