//! A replay's reports: `report.json` (stable field names: those of
//! [`ReplayReport`]) and `report.html`, one self-contained page (inline SVG, no
//! scripts or fonts fetched from anywhere). The page opens with the verdicts (money,
//! SLOs, validity: [`crate::slo`]) and the SLO table, then the summary, the SDK's,
//! consumers' and wallet's counters as named tables, the reconciliation table and
//! five charts: throughput (with tokens missing), send latency (with start lag and
//! the send target), end-to-end latency (with its target), failovers and requeues,
//! and the credited rate of each reward type against its limit. Faults are drawn on
//! every chart's timeline, and the seconds where an SLO was broken are shaded on the
//! chart of that SLO.
//!
//! The charts are drawn here, as SVG, rather than by a charting script in the browser,
//! so the page opens anywhere, offline, and its content is what the JSON says. A few
//! lines of script only mark, after layout, how many charts have visible lines (the
//! headless-browser test reads that mark).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use crate::replay::ReplayReport;

/// Writes `report.json` and `report.html` into `dir`; returns the HTML path.
pub fn write(dir: &Path, r: &ReplayReport) -> anyhow::Result<std::path::PathBuf> {
    std::fs::write(dir.join("report.json"), serde_json::to_vec_pretty(r)?)?;
    let html = dir.join("report.html");
    std::fs::write(&html, html_page(r))?;
    Ok(html)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
];

struct Series {
    name: String,
    values: Vec<f64>,
}

/// One line chart over the run's seconds.
fn chart(
    title: &str,
    unit: &str,
    series: &[Series],
    limits: &[(String, f64)],
    faults: &[(f64, String)],
    broken: &[(String, Vec<u64>)],
) -> String {
    let (w, h, left, right, top, bottom) = (900.0, 260.0, 70.0, 180.0, 30.0, 30.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let len = series
        .iter()
        .map(|s| s.values.len())
        .max()
        .unwrap_or(0)
        .max(2);
    let data_max = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .fold(0.0, f64::max);
    // A limit far above the data would flatten every line: draw limits only when
    // they are within 3x of the data, and list the others in the legend.
    let shown: Vec<&(String, f64)> = limits
        .iter()
        .filter(|(_, v)| data_max > 0.0 && *v <= data_max * 3.0)
        .collect();
    let y_max = shown
        .iter()
        .map(|(_, v)| *v)
        .fold(data_max, f64::max)
        .max(1.0)
        * 1.1;
    let x = |i: f64| left + pw * i / (len - 1) as f64;
    let y = |v: f64| top + ph - ph * v / y_max;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<figure><svg class="chart" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{t}"><text x="{left}" y="18" class="title">{t}</text>"#,
        t = esc(title)
    );
    // Axes and y ticks.
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="{top}" x2="{left}" y2="{b}" stroke="#444"/><line x1="{left}" y1="{b}" x2="{r}" y2="{b}" stroke="#444"/>"##,
        b = top + ph,
        r = left + pw
    );
    for k in 0..=4 {
        let v = y_max * f64::from(k) / 4.0;
        let _ = write!(
            s,
            r##"<text x="{tx}" y="{ty}" class="tick" text-anchor="end">{label}</text><line x1="{left}" y1="{ly}" x2="{r}" y2="{ly}" stroke="#eee"/>"##,
            tx = left - 4.0,
            ty = y(v) + 4.0,
            label = human(v),
            ly = y(v),
            r = left + pw
        );
    }
    let step = ((len as f64 / 10.0).ceil() as usize).max(1);
    for i in (0..len).step_by(step) {
        let _ = write!(
            s,
            r#"<text x="{tx}" y="{ty}" class="tick" text-anchor="middle">{i}s</text>"#,
            tx = x(i as f64),
            ty = top + ph + 16.0
        );
    }
    let _ = write!(
        s,
        r#"<text x="4" y="{}" class="tick">{}</text>"#,
        top - 6.0,
        esc(unit)
    );
    // Seconds where an SLO drawn on this chart was broken: shaded behind the lines.
    let sec_w = pw / (len - 1) as f64;
    for (name, secs) in broken {
        for &t in secs {
            if t as usize >= len {
                continue;
            }
            let _ = write!(
                s,
                r##"<rect class="slo-broken" x="{bx:.1}" y="{top}" width="{sec_w:.1}" height="{ph}" fill="#d62728" fill-opacity="0.12"><title>{n} broken at {t} s</title></rect>"##,
                bx = x(t as f64) - sec_w / 2.0,
                n = esc(name)
            );
        }
    }
    // Faults.
    for (at, label) in faults {
        if *at <= (len - 1) as f64 {
            let _ = write!(
                s,
                r##"<line class="fault" x1="{fx}" y1="{top}" x2="{fx}" y2="{b}" stroke="#d62728" stroke-dasharray="4 3"><title>{l}</title></line>"##,
                fx = x(*at),
                b = top + ph,
                l = esc(label)
            );
        }
    }
    // Lines and legend.
    let mut legend_y = top + 10.0;
    for (n, ser) in series.iter().enumerate() {
        let color = COLORS[n % COLORS.len()];
        let pts: Vec<String> = ser
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", x(i as f64), y(*v)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline class="series" fill="none" stroke="{color}" stroke-width="1.6" points="{}"><title>{}</title></polyline>"#,
            pts.join(" "),
            esc(&ser.name)
        );
        let _ = write!(
            s,
            r#"<rect x="{lx}" y="{ry}" width="12" height="3" fill="{color}"/><text x="{tx}" y="{legend_y}" class="legend">{}</text>"#,
            esc(&ser.name),
            lx = left + pw + 10.0,
            ry = legend_y - 4.0,
            tx = left + pw + 26.0
        );
        legend_y += 16.0;
    }
    for (n, (name, v)) in limits.iter().enumerate() {
        let color = COLORS[n % COLORS.len()];
        if shown.iter().any(|(m, _)| m == name) {
            let _ = write!(
                s,
                r#"<line class="limit" x1="{left}" y1="{ly}" x2="{r}" y2="{ly}" stroke="{color}" stroke-dasharray="6 4"/>"#,
                ly = y(*v),
                r = left + pw
            );
        }
        let _ = write!(
            s,
            r#"<text x="{tx}" y="{legend_y}" class="legend">{} limit {}{}</text>"#,
            esc(name),
            human(*v),
            if shown.iter().any(|(m, _)| m == name) {
                " (dashed)"
            } else {
                " (off scale)"
            },
            tx = left + pw + 10.0
        );
        legend_y += 16.0;
    }
    for (name, secs) in broken {
        if !secs.is_empty() {
            let _ = write!(
                s,
                r##"<rect x="{lx}" y="{ry}" width="12" height="8" fill="#d62728" fill-opacity="0.25"/><text x="{tx}" y="{legend_y}" class="legend">{} broken ({} s)</text>"##,
                esc(name),
                secs.len(),
                lx = left + pw + 10.0,
                ry = legend_y - 7.0,
                tx = left + pw + 26.0
            );
            legend_y += 16.0;
        }
    }
    s.push_str("</svg></figure>\n");
    s
}

/// A two-column table of named counters.
fn counters_table(caption: &str, m: &std::collections::BTreeMap<String, u64>) -> String {
    let mut t = format!(
        "<table class=\"counters\"><caption>{}</caption><tr><th>counter</th><th>value</th></tr>",
        esc(caption)
    );
    for (k, v) in m {
        let _ = write!(t, "<tr><td>{}</td><td class=\"num\">{v}</td></tr>", esc(k));
    }
    if m.is_empty() {
        t.push_str("<tr><td colspan=\"2\">none</td></tr>");
    }
    t.push_str("</table>\n");
    t
}

/// The verdict section: the headline, the SLO table, why a run is invalid.
fn verdict_section(r: &ReplayReport) -> String {
    let v = &r.verdict;
    let word = |b: bool| if b { "PASS" } else { "FAIL" };
    let mut rows = String::new();
    for c in &v.checks {
        let secs = if c.broken_secs.is_empty() {
            "none".to_string()
        } else {
            let shown: Vec<String> = c
                .broken_secs
                .iter()
                .take(20)
                .map(|t| format!("{t}"))
                .collect();
            let more = c.broken_secs.len().saturating_sub(20);
            format!(
                "{}{}",
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            )
        };
        let _ = write!(
            rows,
            r#"<tr class="{cls}" data-slo="{name}"><td>{name}</td><td>{res}</td><td>{target}</td><td>{actual}</td><td>{secs}</td></tr>"#,
            cls = if c.pass { "pass" } else { "fail" },
            name = esc(&c.name),
            res = word(c.pass),
            target = esc(&c.target),
            actual = esc(&c.actual),
            secs = esc(&secs),
        );
    }
    let mut invalid = String::new();
    for reason in &v.invalid_reasons {
        let _ = write!(invalid, "<li>{}</li>", esc(reason));
    }
    format!(
        r#"<section id="verdict" data-money="{money}" data-slo="{slo}" data-valid="{valid}">
<h2>Verdict</h2>
<p class="headline {overall}">{headline}</p>
<table><tr><th>money (reconciliation)</th><td class="{money_cls}">{money}</td></tr>
<tr><th>service levels</th><td class="{slo_cls}">{slo}</td></tr>
<tr><th>run</th><td class="{valid_cls}">{valid}</td></tr></table>
<table class="slo"><tr><th>SLO</th><th>result</th><th>target</th><th>actual</th><th>broken in seconds</th></tr>{rows}</table>
{invalid}
</section>"#,
        money = word(v.money),
        slo = word(v.slo),
        valid = if v.valid { "VALID" } else { "INVALID" },
        money_cls = if v.money { "ok" } else { "bad" },
        slo_cls = if v.slo { "ok" } else { "bad" },
        valid_cls = if v.valid { "ok" } else { "bad" },
        overall = if v.passed() { "ok" } else { "bad" },
        headline = esc(&v.headline),
        invalid = if invalid.is_empty() {
            String::new()
        } else {
            format!(
                "<p>The run is invalid: its figures describe the load tester, not the pipeline.</p><ul class=\"invalid\">{invalid}</ul>"
            )
        },
    )
}

fn human(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
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

/// The HTML page.
pub fn html_page(r: &ReplayReport) -> String {
    let tl = &r.timeline;
    let col = |f: &dyn Fn(&crate::replay::Second) -> f64| tl.iter().map(f).collect::<Vec<f64>>();
    let types: BTreeSet<String> = tl.iter().flat_map(|s| s.credited.keys().cloned()).collect();
    let broken = |name: &str| -> Vec<(String, Vec<u64>)> {
        r.verdict
            .checks
            .iter()
            .filter(|c| c.name == name && !c.broken_secs.is_empty())
            .map(|c| (c.name.clone(), c.broken_secs.clone()))
            .collect()
    };
    let mut charts = String::new();
    charts.push_str(&chart(
        "Throughput",
        "rewards/s",
        &[
            Series {
                name: "sent".into(),
                values: col(&|s| s.sent as f64),
            },
            Series {
                name: "credited".into(),
                values: col(&|s| s.credited.values().sum::<u64>() as f64),
            },
            Series {
                name: "refused".into(),
                values: col(&|s| s.refused as f64),
            },
            Series {
                name: "tokens missing".into(),
                values: col(&|s| s.tokens_missing as f64),
            },
        ],
        &[],
        &r.faults,
        &broken("tokens_stored"),
    ));
    charts.push_str(&chart(
        "Send latency (from intended start)",
        "ms",
        &[
            Series {
                name: "p50".into(),
                values: col(&|s| s.send_p50_us as f64 / 1000.0),
            },
            Series {
                name: "p99".into(),
                values: col(&|s| s.send_p99_us as f64 / 1000.0),
            },
            Series {
                name: "start lag p99".into(),
                values: col(&|s| s.start_lag_p99_us as f64 / 1000.0),
            },
        ],
        &r.verdict
            .targets
            .send_p99_ms
            .map(|t| vec![("send p99 target".to_string(), t)])
            .unwrap_or_default(),
        &r.faults,
        &broken("send_p99_ms"),
    ));
    charts.push_str(&chart(
        "End-to-end latency (send to credit), by credit second",
        "s",
        &[
            Series {
                name: "p50".into(),
                values: col(&|s| s.e2e_p50_ms as f64 / 1000.0),
            },
            Series {
                name: "p99".into(),
                values: col(&|s| s.e2e_p99_ms as f64 / 1000.0),
            },
        ],
        &r.verdict
            .targets
            .end_to_end_p99_ms
            .map(|t| vec![("end-to-end p99 target".to_string(), t / 1000.0)])
            .unwrap_or_default(),
        &r.faults,
        &broken("end_to_end_p99_ms"),
    ));
    let cum =
        |f: &dyn Fn(&crate::replay::Second) -> u64| deltas(&tl.iter().map(f).collect::<Vec<u64>>());
    charts.push_str(&chart(
        "Failovers, spool and requeues",
        "events/s",
        &[
            Series {
                name: "SDK failovers".into(),
                values: cum(&|s| s.sdk_failovers),
            },
            Series {
                name: "SDK spooled".into(),
                values: cum(&|s| s.sdk_spooled),
            },
            Series {
                name: "requeued: failed".into(),
                values: cum(&|s| s.requeued_failed),
            },
            Series {
                name: "requeued: limited".into(),
                values: cum(&|s| s.requeued_limited),
            },
            Series {
                name: "requeued: fused".into(),
                values: cum(&|s| s.requeued_fused),
            },
            Series {
                name: "dead-lettered".into(),
                values: cum(&|s| s.dead_lettered),
            },
        ],
        &[],
        &r.faults,
        &[],
    ));
    let per_type: Vec<Series> = types
        .iter()
        .map(|t| Series {
            name: format!("{t} credited"),
            values: col(&|s| s.credited.get(t).copied().unwrap_or(0) as f64),
        })
        .collect();
    let limits: Vec<(String, f64)> = types
        .iter()
        .filter_map(|t| r.limits.get(t).map(|l| (t.clone(), *l)))
        .collect();
    charts.push_str(&chart(
        "Credited per reward type against its limit",
        "credits/s",
        &per_type,
        &limits,
        &r.faults,
        &[],
    ));

    let mut table = String::new();
    for c in &r.reconciliation.checks {
        let _ = write!(
            table,
            r#"<tr class="{cls}"><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            esc(&c.name),
            if c.pass { "PASS" } else { "FAIL" },
            esc(&c.detail),
            cls = if c.pass { "pass" } else { "fail" }
        );
    }
    let verdict = esc(&r.verdict.headline);
    let mut counters = counters_table("SDK (this process, at close)", &r.sdk);
    counters.push_str(&counters_table(
        "Consumers (summed over members and restarts)",
        &r.consumers,
    ));
    if !r.wallet.is_empty() {
        counters.push_str(&counters_table("Stand-in wallet", &r.wallet));
    }
    let refused = if r.refused.is_empty() {
        "none".to_string()
    } else {
        r.refused
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let lat = |l: &crate::replay::Latency, unit: &str| {
        format!(
            "p50 {} · p99 {} · p99.9 {} · max {} {unit}",
            l.p50, l.p99, l.p999, l.max
        )
    };
    let mut faults = String::new();
    for (at, label) in &r.faults {
        let _ = write!(faults, "<li>{at:.1} s: {}</li>", esc(label));
    }
    if faults.is_empty() {
        faults.push_str("<li>none</li>");
    }
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Replay {profile} {tag}: {verdict}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; margin: 8px 0 16px; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; }}
tr.fail td {{ background: #fdd; }} tr.pass td:nth-child(2) {{ color: #080; }}
td.ok {{ color: #080; font-weight: 600; }} td.bad {{ color: #b00; font-weight: 600; }}
p.headline {{ font-size: 16px; font-weight: 600; padding: 6px 10px; }}
p.headline.ok {{ background: #e6f4e6; }} p.headline.bad {{ background: #fde2e2; }}
table.counters {{ display: inline-table; vertical-align: top; margin-right: 24px; }}
caption {{ text-align: left; font-weight: 600; }} td.num {{ text-align: right; }}
.title {{ font-weight: 600; font-size: 14px; }} .tick, .legend {{ font-size: 11px; fill: #444; }}
figure {{ margin: 8px 0; }}
</style></head><body>
<h1>Replay <code>{profile}</code> <small>run {tag}</small></h1>
{verdict_section}
<h2>Summary</h2>
<table>
<tr><th>scheduled</th><td>{scheduled} over {duration:.0} s, {users} users</td></tr>
<tr><th>sent</th><td>{sent} ({sent_rate:.0}/s; {repeats} deliberate repeats), refused: {refused}, shed {shed}</td></tr>
<tr><th>credited</th><td>{credited} distinct rewards in {span:.1} s: {credited_rate:.0}/s, peak {peak}/s</td></tr>
<tr><th>send latency</th><td>{send_lat}</td></tr>
<tr><th>start lag</th><td>{lag}</td></tr>
<tr><th>end to end</th><td>{e2e}</td></tr>
<tr><th>ceilings</th><td>{ceilings}</td></tr>
</table>
<h2>Counters</h2>
{counters}
<h2>Reconciliation</h2>
<table><tr><th>check</th><th>result</th><th>detail</th></tr>{table}</table>
<h2>Faults</h2><ul>{faults}</ul>
<h2>Timeline</h2>
{charts}
<script>
// Marks how many charts have at least one visible line, once laid out.
window.addEventListener('load', function () {{
  var n = 0;
  document.querySelectorAll('svg.chart').forEach(function (svg) {{
    var lines = svg.querySelectorAll('polyline.series');
    for (var i = 0; i < lines.length; i++) {{
      var b = lines[i].getBBox();
      if (b.width > 0) {{ n++; break; }}
    }}
  }});
  document.body.setAttribute('data-charts-rendered', String(n));
}});
</script>
</body></html>
"#,
        profile = esc(&r.profile),
        tag = esc(&r.tag),
        scheduled = r.scheduled,
        duration = r.duration_secs,
        users = r.users,
        sent = r.sent,
        sent_rate = r.sent_per_sec,
        repeats = r.repeats,
        refused = esc(&refused),
        verdict_section = verdict_section(r),
        shed = r.shed,
        credited = r.credited,
        span = r.span_secs,
        credited_rate = r.credited_per_sec,
        peak = r.credited_peak_per_sec,
        send_lat = lat(&r.send_latency_us, "µs"),
        lag = lat(&r.start_lag_us, "µs"),
        e2e = lat(&r.end_to_end_ms, "ms"),
        ceilings = match &r.ceilings {
            Some(c) => esc(&format!(
                "raw rdkafka producer {:.0}/s (end-to-end {:.3} of it); claim script alone {:.0}/s (end-to-end {:.3} of it)",
                c.raw_producer_per_sec,
                r.credited_per_sec / c.raw_producer_per_sec,
                c.claim_script_per_sec,
                r.credited_per_sec / c.claim_script_per_sec
            )),
            None => "not measured (--ceilings)".to_string(),
        },
    )
}
