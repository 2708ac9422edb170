//! One line chart of the report page, drawn as inline SVG over the run's seconds:
//! axes and ticks, the seconds an SLO was broken, the faults, the lines, the limits
//! and the legend.

use std::fmt::Write as _;

use super::esc;

const COLORS: [&str; 8] = [
    "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
];

pub(super) struct Series {
    pub(super) name: String,
    pub(super) values: Vec<f64>,
}

/// Where a chart's plot area lies in the SVG, and its scales: `len` seconds across,
/// 0 to `y_max` up.
#[derive(Debug, Clone, Copy)]
struct Frame {
    left: f64,
    top: f64,
    pw: f64,
    ph: f64,
    len: usize,
    y_max: f64,
}

impl Frame {
    /// The x of second `i`.
    fn x(&self, i: f64) -> f64 {
        self.left + self.pw * i / (self.len - 1) as f64
    }

    /// The y of value `v`.
    fn y(&self, v: f64) -> f64 {
        self.top + self.ph - self.ph * v / self.y_max
    }
}

/// One line chart over the run's seconds.
pub(super) fn chart(
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
    let f = Frame {
        left,
        top,
        pw,
        ph,
        len,
        y_max,
    };
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<figure><svg class="chart" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{t}"><text x="{left}" y="18" class="title">{t}</text>"#,
        t = esc(title)
    );
    axes(&mut s, &f, unit);
    broken_shading(&mut s, &f, broken);
    fault_lines(&mut s, &f, faults);
    // Lines and legend.
    let legend_y = series_lines(&mut s, &f, series, top + 10.0);
    let legend_y = limit_lines(&mut s, &f, limits, &shown, legend_y);
    broken_legend(&mut s, &f, broken, legend_y);
    s.push_str("</svg></figure>\n");
    s
}

/// Axes, y ticks (five, with grid lines), x ticks (about ten, in seconds) and the unit.
fn axes(s: &mut String, f: &Frame, unit: &str) {
    let Frame {
        left,
        top,
        pw,
        ph,
        len,
        y_max,
    } = *f;
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
            ty = f.y(v) + 4.0,
            label = human(v),
            ly = f.y(v),
            r = left + pw
        );
    }
    let step = ((len as f64 / 10.0).ceil() as usize).max(1);
    for i in (0..len).step_by(step) {
        let _ = write!(
            s,
            r#"<text x="{tx}" y="{ty}" class="tick" text-anchor="middle">{i}s</text>"#,
            tx = f.x(i as f64),
            ty = top + ph + 16.0
        );
    }
    let _ = write!(
        s,
        r#"<text x="4" y="{}" class="tick">{}</text>"#,
        top - 6.0,
        esc(unit)
    );
}

/// Seconds where an SLO drawn on this chart was broken: shaded behind the lines.
fn broken_shading(s: &mut String, f: &Frame, broken: &[(String, Vec<u64>)]) {
    let Frame {
        top, pw, ph, len, ..
    } = *f;
    let sec_w = pw / (len - 1) as f64;
    for (name, secs) in broken {
        for &t in secs {
            if t as usize >= len {
                continue;
            }
            let _ = write!(
                s,
                r##"<rect class="slo-broken" x="{bx:.1}" y="{top}" width="{sec_w:.1}" height="{ph}" fill="#d62728" fill-opacity="0.12"><title>{n} broken at {t} s</title></rect>"##,
                bx = f.x(t as f64) - sec_w / 2.0,
                n = esc(name)
            );
        }
    }
}

/// Faults: a dashed vertical line at each, named in its tooltip.
fn fault_lines(s: &mut String, f: &Frame, faults: &[(f64, String)]) {
    let Frame { top, ph, len, .. } = *f;
    for (at, label) in faults {
        if *at <= (len - 1) as f64 {
            let _ = write!(
                s,
                r##"<line class="fault" x1="{fx}" y1="{top}" x2="{fx}" y2="{b}" stroke="#d62728" stroke-dasharray="4 3"><title>{l}</title></line>"##,
                fx = f.x(*at),
                b = top + ph,
                l = esc(label)
            );
        }
    }
}

/// Each series' line and its legend entry, from `legend_y` down; returns the next
/// legend line's y.
fn series_lines(s: &mut String, f: &Frame, series: &[Series], mut legend_y: f64) -> f64 {
    let Frame { left, pw, .. } = *f;
    for (n, ser) in series.iter().enumerate() {
        let color = COLORS[n % COLORS.len()];
        let pts: Vec<String> = ser
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", f.x(i as f64), f.y(*v)))
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
    legend_y
}

/// Each limit: a dashed line when it is among the `shown`, and a legend entry either
/// way, from `legend_y` down; returns the next legend line's y.
fn limit_lines(
    s: &mut String,
    f: &Frame,
    limits: &[(String, f64)],
    shown: &[&(String, f64)],
    mut legend_y: f64,
) -> f64 {
    let Frame { left, pw, .. } = *f;
    for (n, (name, v)) in limits.iter().enumerate() {
        let color = COLORS[n % COLORS.len()];
        if shown.iter().any(|(m, _)| m == name) {
            let _ = write!(
                s,
                r#"<line class="limit" x1="{left}" y1="{ly}" x2="{r}" y2="{ly}" stroke="{color}" stroke-dasharray="6 4"/>"#,
                ly = f.y(*v),
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
    legend_y
}

/// A legend entry for each SLO broken on this chart, with its count of seconds, from
/// `legend_y` down.
fn broken_legend(s: &mut String, f: &Frame, broken: &[(String, Vec<u64>)], mut legend_y: f64) {
    let Frame { left, pw, .. } = *f;
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
