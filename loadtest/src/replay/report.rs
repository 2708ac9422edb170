//! Everything a replay measured: the JSON report's body, with the parts' ceilings and
//! what each rate-limited type was credited at.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Latency, Second, recovery};

/// The parts' ceilings, measured right after the replay on the same stack.
#[derive(Debug, Clone, Serialize)]
pub struct Ceilings {
    /// A bare rdkafka producer sending the SDK's wire bytes, events/s.
    pub raw_producer_per_sec: f64,
    /// The claim script alone by EVALSHA, calls/s.
    pub claim_script_per_sec: f64,
    /// The `redis-benchmark` command line.
    pub claim_script_command: String,
    /// The run's end-to-end credited/s divided by `raw_producer_per_sec`: how the
    /// whole pipeline compares with a bare producer of single events on the same
    /// machine (filled when the report is built).
    pub end_to_end_vs_raw_producer: f64,
    /// The same, divided by `claim_script_per_sec`.
    pub end_to_end_vs_claim_script: f64,
}

/// A rate-limited type's achieved rate: credits per second between its first and last
/// credit second (edges left out). While a backlog of the type lasts, the fleet-wide
/// limit is what bounds it, so `per_sec / limit` is the limit's accuracy.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LimitedRate {
    /// The fleet-wide limit, credits/s.
    pub limit: f64,
    /// Credited per second over the span.
    pub per_sec: f64,
    /// Seconds the span covers.
    pub secs: u64,
}

/// Everything a replay measured (the JSON report's body).
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// The profile.
    pub profile: String,
    /// Run tag.
    pub tag: String,
    /// Money, SLOs and validity, with the SLO table ([`crate::slo`]).
    pub verdict: crate::slo::Verdict,
    /// Replay length, seconds (the schedule).
    pub duration_secs: f64,
    /// Users.
    pub users: u64,
    /// Requests the schedule asked for.
    pub scheduled: u64,
    /// Accepted by the SDK (repeats included).
    pub sent: u64,
    /// Of them, deliberate repeats.
    pub repeats: u64,
    /// Refused by the SDK, by reason (`in_doubt` and `store` may still be credited).
    pub refused: BTreeMap<String, u64>,
    /// Accepted calls by the store that held the reward when the call answered:
    /// `stored` (Redis), `queued` (a broker, Redis slow or away), `spooled` (the
    /// host's disk, both brokers away too), `none` (modes that answer before a write).
    pub answered: BTreeMap<String, u64>,
    /// Shed by the load tester.
    pub shed: u64,
    /// Send latency from intended start, µs.
    pub send_latency_us: Latency,
    /// The call alone (actual start to return), µs.
    pub call_latency_us: Latency,
    /// Intended → actual start, µs.
    pub start_lag_us: Latency,
    /// Send → credit, ms.
    pub end_to_end_ms: Latency,
    /// Distinct rewards credited.
    pub credited: u64,
    /// Credited rewards per second from the first send to the last credit.
    pub credited_per_sec: f64,
    /// Peak credited in one second.
    pub credited_peak_per_sec: u64,
    /// Sending rate achieved over the schedule, per second.
    pub sent_per_sec: f64,
    /// Seconds from the first send to the last credit.
    pub span_secs: f64,
    /// Consumer rate limit per type, credits/s.
    pub limits: BTreeMap<String, f64>,
    /// What each type given a limit for this run (`--limit`) was credited at
    /// ([`LimitedRate`]).
    pub limited: BTreeMap<String, LimitedRate>,
    /// Faults injected: (seconds, label).
    pub faults: Vec<(f64, String)>,
    /// Per fault: when it struck, when the part was back, time to recover, cost
    /// ([`recovery`]).
    pub fault_verdicts: Vec<recovery::FaultVerdict>,
    /// The SDK's final counters.
    pub sdk: BTreeMap<String, u64>,
    /// The consumers' final counters (summed).
    pub consumers: BTreeMap<String, u64>,
    /// Per second.
    pub timeline: Vec<Second>,
    /// The PASS/FAIL table.
    pub reconciliation: crate::reconcile::Reconciliation,
    /// The parts' ceilings (with `--ceilings`).
    pub ceilings: Option<Ceilings>,
    /// What the run cost per credited reward ([`crate::cost`]), from the start of
    /// sending to the end of the drain.
    pub cost: Option<crate::cost::Cost>,
    /// The downstream double's counters (runs with a downstream fault): calls, failed
    /// on purpose, answered late after crediting, repeats answered with the first
    /// receipt.
    pub downstream_double: BTreeMap<String, u64>,
    /// Each fault proxy's counters by link (runs with network faults): connections,
    /// resets, bytes forwarded each way, answer bytes dropped.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fault_proxies: BTreeMap<String, BTreeMap<String, u64>>,
}
