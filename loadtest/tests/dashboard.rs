//! The dashboard, the metric list and the code agree: every metric the Grafana
//! dashboard queries is listed in `docs/metrics.md`, and the list is exactly the set of
//! metric names the code emits. (Reads files only; needs no server.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use reward_testkit::repo;

/// Every `reward_…` identifier in `text` (letters, digits, underscores).
fn names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("reward_") {
        let before_ok = i == 0
            || !rest[..i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        if before_ok {
            out.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The metric components (name prefixes).
const COMPONENTS: [&str; 7] = [
    "reward_sdk_",
    "reward_consumer_",
    "reward_service_",
    "reward_config_",
    "reward_redis_",
    "reward_audit_",
    "reward_agent_",
];

/// Metric names in the code: string literals `"reward_<component>_…"` (the macros'
/// names, and the names handed to the consumer's counting helpers).
fn emitted() -> BTreeSet<String> {
    let mut files = Vec::new();
    for d in [
        "runtime/src",
        "sdk/src",
        "consumer/src",
        "reward-service/src",
        "tools/src",
        "agent/src",
    ] {
        rust_files(&repo().join(d), &mut files);
    }
    let mut out = BTreeSet::new();
    // The catalogue lists every name; what counts here is code that records one.
    files.retain(|f| !f.ends_with("runtime/src/catalogue.rs"));
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, _) in text.match_indices("\"reward_") {
            let lit = &text[i + 1..];
            let end = lit.find('"').unwrap();
            let name = &lit[..end];
            if name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && COMPONENTS.iter().any(|p| name.starts_with(p))
            {
                out.insert(name.to_string());
            }
        }
    }
    out
}

/// The metric a queried series belongs to: a histogram's `_bucket`, `_sum` and
/// `_count` series are its documented name's.
fn base_name(q: &str, documented: &BTreeSet<String>) -> String {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| q.strip_suffix(s).filter(|b| documented.contains(*b)))
        .unwrap_or(q)
        .to_string()
}

/// The names in docs/metrics.md's tables (first column).
fn documented() -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_dashboard_metric_is_documented_and_emitted() {
    let dash: serde_json::Value = serde_json::from_slice(
        &std::fs::read(repo().join("ops/grafana/reward-pipeline.json")).unwrap(),
    )
    .unwrap();
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(exprs.len() >= 10, "{exprs:?}");
    let documented = documented();
    let emitted = emitted();
    for e in &exprs {
        let queried = names(e);
        assert!(!queried.is_empty(), "no metric in {e}");
        for q in queried {
            let base = base_name(&q, &documented);
            assert!(
                documented.contains(&base),
                "the dashboard queries {q}, not in docs/metrics.md"
            );
            assert!(
                emitted.contains(&base),
                "the dashboard queries {q}, which no code emits"
            );
        }
    }
    // The panels an operator watches during a campaign are there.
    let titles: Vec<&str> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    for want in [
        "Send rate",
        "latency",
        "Failovers",
        "lag",
        "against its limit",
        "outcomes",
        "Budget",
        "dead letters",
    ] {
        assert!(
            titles.iter().any(|t| t.contains(want)),
            "no panel about {want}: {titles:?}"
        );
    }
}

/// The names and types in docs/metrics.md's tables (first and second columns).
fn documented_types() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|l| {
            let mut cols = l.split('|');
            let name = cols
                .next()
                .unwrap()
                .trim()
                .trim_end_matches('`')
                .to_string();
            let kind = cols.next().unwrap_or("").trim().to_string();
            (name, kind)
        })
        .collect()
}

#[test]
fn the_catalogue_is_the_documented_list_with_its_types() {
    use reward_runtime::catalogue;
    let docs = documented_types();
    for (name, kind) in &docs {
        let m = catalogue::find(name)
            .unwrap_or_else(|| panic!("{name} is in docs/metrics.md, not in the catalogue"));
        assert_eq!(kind, m.kind.as_str(), "{name}: docs say {kind}");
    }
    for m in catalogue::all() {
        assert!(
            docs.iter().any(|(n, _)| n == m.name),
            "{} is in the catalogue, not in docs/metrics.md",
            m.name
        );
    }
}

#[test]
fn the_metric_list_is_exactly_what_the_code_emits() {
    let documented = documented();
    let emitted = emitted();
    let undocumented: Vec<_> = emitted.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&emitted).collect();
    assert!(
        undocumented.is_empty(),
        "emitted but not in docs/metrics.md: {undocumented:?}"
    );
    assert!(
        stale.is_empty(),
        "in docs/metrics.md but never emitted: {stale:?}"
    );
    for n in &documented {
        assert!(
            COMPONENTS.iter().any(|p| n.starts_with(p)),
            "{n}: unknown component"
        );
    }
}

/// The `expr:` values of a rules file (one line, or a folded `>-` block).
fn rule_exprs(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(rest) = l.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let rest = rest.trim();
        if rest == ">-" {
            let indent = l.len() - l.trim_start().len();
            let block: Vec<&str> = lines[i + 1..]
                .iter()
                .take_while(|b| b.len() - b.trim_start().len() > indent)
                .map(|b| b.trim())
                .collect();
            out.push(block.join(" "));
        } else {
            out.push(rest.to_string());
        }
    }
    out
}

#[test]
fn every_rule_queries_documented_metrics_and_every_alert_has_a_firing_test() {
    let rules = std::fs::read_to_string(repo().join("ops/prometheus/rules.yml")).unwrap();
    let tests = std::fs::read_to_string(repo().join("ops/prometheus/rules_test.yml")).unwrap();
    let documented = documented();
    let exprs = rule_exprs(&rules);
    assert!(exprs.len() >= 30, "{} rules", exprs.len());
    for e in &exprs {
        for q in names(e) {
            let base = base_name(&q, &documented);
            assert!(
                documented.contains(&base),
                "a rule queries {q}, not in docs/metrics.md: {e}"
            );
        }
    }
    // Every alert is expected to fire in at least one test case: its name followed,
    // before the next alertname, by an expected alert's labels.
    let alerts: BTreeSet<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 20, "{alerts:?}");
    for a in alerts {
        let fires = tests
            .match_indices(&format!("alertname: {a}\n"))
            .any(|(i, _)| {
                let after = &tests[i..];
                let case = after[1..]
                    .find("alertname: ")
                    .map_or(after, |end| &after[..end + 1]);
                case.contains("exp_labels")
            });
        assert!(fires, "{a} has no promtool test in which it fires");
    }
}
