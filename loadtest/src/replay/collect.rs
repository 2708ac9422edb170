//! What a run gathers while it plays: every send's outcome into histograms,
//! per-second buckets and `sent.tsv`, and a per-second sample of the SDK's and the
//! consumers' counters.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::sync::mpsc;

use super::children::{SWEPT, Services, consumer_counters, sweeper_granted};
use super::schedule::Sample;

// 1 µs .. 10 min, 3 significant digits: constant bounds that cannot be refused.
#[allow(clippy::expect_used)]
pub(super) fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("constant histogram bounds")
}

#[derive(Default)]
pub(super) struct Collected {
    pub(super) send: Option<Histogram<u64>>,
    pub(super) call: Option<Histogram<u64>>,
    pub(super) lag: Option<Histogram<u64>>,
    /// Per second: accepted, refused, send latency, start lag.
    pub(super) per_second: Vec<(u64, u64, Histogram<u64>, Histogram<u64>)>,
    pub(super) refused: BTreeMap<String, u64>,
    /// Accepted calls by the store that held the reward when the call answered.
    pub(super) answered: BTreeMap<String, u64>,
    pub(super) sent: u64,
    pub(super) repeats: u64,
    pub(super) sent_amount_by_scope: BTreeMap<String, i64>,
}

/// One second's sample: the consumers' counters (summed) and the SDK's.
pub(super) type CounterRow = (BTreeMap<String, u64>, sdk::queue::StatsSnapshot);

/// Samples → histograms, per-second buckets and sent.tsv, until every sender of
/// samples is gone.
pub(super) async fn collect(
    mut rx: mpsc::UnboundedReceiver<Sample>,
    sent_path: PathBuf,
) -> anyhow::Result<Collected> {
    let file = std::fs::File::create(&sent_path)?;
    let mut out = std::io::BufWriter::new(file);
    let doubts_path = sent_path.with_file_name(super::hosts::STORE_IN_DOUBT);
    // Refused in doubt, and accepted (a repeat, or another attempt): only those
    // never accepted are in doubt; an accepted one is held to every check.
    let mut doubts: Vec<String> = Vec::new();
    let mut accepted: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut c = Collected {
        send: Some(hist()),
        call: Some(hist()),
        lag: Some(hist()),
        ..Collected::default()
    };
    while let Some(s) = rx.recv().await {
        match (&s.outcome, &s.in_doubt) {
            (Err(kind), Some((r, _))) if super::schedule::refused_in_doubt(kind) => {
                doubts.push(r.trade_no.clone())
            }
            (Ok((r, _)), _) => {
                accepted.insert(r.trade_no.clone());
            }
            _ => {}
        }
        c.add(s, &mut out)?;
    }
    out.flush()?;
    let mut file = std::io::BufWriter::new(std::fs::File::create(doubts_path)?);
    for t in doubts.iter().filter(|t| !accepted.contains(*t)) {
        writeln!(file, "{t}")?;
    }
    file.flush()?;
    anyhow::Ok(c)
}

impl Collected {
    /// Counts one sample; an accepted reward's line goes to `out` (`sent.tsv`).
    fn add(
        &mut self,
        s: Sample,
        out: &mut std::io::BufWriter<std::fs::File>,
    ) -> anyhow::Result<()> {
        let c = self;
        let idx = s.second as usize;
        while c.per_second.len() <= idx {
            c.per_second.push((0, 0, hist(), hist()));
        }
        if let Some((r, repeat)) = &s.in_doubt {
            // Unanswered when its SDK host died: kept for reconciliation (it may
            // have been stored, and then credited), counted as a refusal.
            writeln!(out, "{}", r.line(*repeat))?;
        }
        match s.outcome {
            Ok((r, repeat)) => {
                writeln!(out, "{}", r.line(repeat))?;
                c.sent += 1;
                *c.answered
                    .entry(s.held_by.unwrap_or("none").to_string())
                    .or_default() += 1;
                if repeat {
                    c.repeats += 1;
                } else {
                    *c.sent_amount_by_scope
                        .entry(reward_service::service::scope(&r.activity_id, &r.scene_id))
                        .or_default() += r.amount;
                }
                c.per_second[idx].0 += 1;
            }
            Err(kind) => {
                *c.refused.entry(kind.to_string()).or_default() += 1;
                c.per_second[idx].1 += 1;
            }
        }
        let total = s.end_us.saturating_sub(s.intended_us).max(1);
        let _ = c.per_second[idx].2.record(total);
        if let Some(h) = c.send.as_mut() {
            let _ = h.record(total);
        }
        if let Some(h) = c.call.as_mut() {
            let _ = h.record(s.end_us.saturating_sub(s.start_us).max(1));
        }
        let lag = s.start_us.saturating_sub(s.intended_us).max(1);
        let _ = c.per_second[idx].3.record(lag);
        if let Some(h) = c.lag.as_mut() {
            let _ = h.record(lag);
        }
        Ok(())
    }
}

/// Per-second sampler of the SDK's and consumers' counters and the sweeper's grants
/// (kept under [`SWEPT`]), until `stop` is notified.
pub(super) async fn sample(
    sdk: Arc<super::hosts::Side>,
    dir: PathBuf,
    services: Arc<tokio::sync::Mutex<Services>>,
    credential: Option<String>,
    stop: Arc<tokio::sync::Notify>,
) -> Vec<CounterRow> {
    let mut rows: Vec<CounterRow> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut swept = Swept::default();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.notified() => break,
        }
        let mut counters = consumer_counters(&dir);
        let now = sweeper_granted(&services, credential.as_deref()).await;
        counters.insert(SWEPT.to_string(), swept.add(now));
        rows.push((counters, sdk.stats()));
    }
    rows
}

/// The sweeper's grants summed over the instances, kept monotonic across restarts
/// (a restarted instance counts from 0 again).
#[derive(Default)]
struct Swept {
    last: BTreeMap<String, u64>,
    total: u64,
}

impl Swept {
    fn add(&mut self, now: BTreeMap<String, u64>) -> u64 {
        for (name, v) in now {
            let before = self.last.get(&name).copied().unwrap_or(0);
            self.total += if v >= before { v - before } else { v };
            self.last.insert(name, v);
        }
        self.total
    }
}
