//! A replay's reports: `report.json` (stable field names: those of
//! [`ReplayReport`]) and `report.html`, one self-contained page (inline SVG, no
//! scripts or fonts fetched from anywhere). The page opens with the verdicts (money,
//! SLOs, validity: [`crate::slo`]) and the SLO table, then the summary, the SDK's,
//! consumers' and downstream double's counters as named tables, the reconciliation table and
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

use std::fmt::Write as _;
use std::path::Path;

use crate::replay::ReplayReport;

mod chart;
mod timeline;

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

/// The summary section: what was scheduled, sent and credited, the latencies and the
/// ceilings.
fn summary_section(r: &ReplayReport) -> String {
    let refused = if r.refused.is_empty() {
        "none".to_string()
    } else {
        r.refused
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let answered = r
        .answered
        .iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect::<Vec<_>>()
        .join(", ");
    let lat = |l: &crate::replay::Latency, unit: &str| {
        format!(
            "p50 {} · p99 {} · p99.9 {} · max {} {unit}",
            l.p50, l.p99, l.p999, l.max
        )
    };
    format!(
        r#"<h2>Summary</h2>
<table>
<tr><th>scheduled</th><td>{scheduled} over {duration:.0} s, {users} users</td></tr>
<tr><th>sent</th><td>{sent} ({sent_rate:.0}/s; {repeats} deliberate repeats), answered from: {answered}; refused: {refused}, shed {shed}</td></tr>
<tr><th>credited</th><td>{credited} distinct rewards in {span:.1} s: {credited_rate:.0}/s, peak {peak}/s</td></tr>
<tr><th>send latency</th><td>{send_lat}</td></tr>
<tr><th>start lag</th><td>{lag}</td></tr>
<tr><th>end to end</th><td>{e2e}</td></tr>
<tr><th>ceilings</th><td>{ceilings}</td></tr>
<tr><th>cost per credited reward</th><td>{cost}</td></tr>
</table>"#,
        scheduled = r.scheduled,
        duration = r.duration_secs,
        users = r.users,
        sent = r.sent,
        sent_rate = r.sent_per_sec,
        repeats = r.repeats,
        answered = esc(&answered),
        refused = esc(&refused),
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
        cost = match &r.cost {
            Some(c) => esc(&c.lines().join(" ")),
            None => "not measured".to_string(),
        },
    )
}

/// The counters section's tables: the SDK's, the consumers' and (when there is one)
/// the downstream double's.
fn counters_section(r: &ReplayReport) -> String {
    let mut counters = counters_table("SDK (this process, at close)", &r.sdk);
    counters.push_str(&counters_table(
        "Consumers (summed over members and restarts)",
        &r.consumers,
    ));
    if !r.downstream_double.is_empty() {
        counters.push_str(&counters_table("Downstream double", &r.downstream_double));
    }
    counters
}

/// The reconciliation table's rows, one per check.
fn reconciliation_rows(r: &ReplayReport) -> String {
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
    table
}

/// The faults list's items: when, what, recovery and cost, or `none`.
fn fault_items(r: &ReplayReport) -> String {
    let mut faults = String::new();
    for v in &r.fault_verdicts {
        let _ = write!(faults, "<li>{}</li>", esc(v.line().trim()));
    }
    if faults.is_empty() {
        faults.push_str("<li>none</li>");
    }
    faults
}

/// The HTML page.
pub fn html_page(r: &ReplayReport) -> String {
    let charts = timeline::timeline_charts(r);
    let table = reconciliation_rows(r);
    let verdict = esc(&r.verdict.headline);
    let counters = counters_section(r);
    let faults = fault_items(r);
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
{summary_section}
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
        verdict_section = verdict_section(r),
        summary_section = summary_section(r),
    )
}
