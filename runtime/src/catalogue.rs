//! Every metric the pipeline exports, once: its name, type, HELP text and labels.
//!
//! Two things an operator needs from a metric are not free in Prometheus:
//!
//! - **A series before its first event.** `rate()` and `increase()` need two samples,
//!   so a counter that appears at its first event hides that event (a panel shows "No
//!   data" or 0 while a failover happened). [`register`] therefore registers every
//!   counter and histogram of a component at 0, for every label value known when the
//!   process starts: the fixed sets listed here (outcomes, reasons, results) and, by
//!   the owning crate, the values its configuration names (reward types, producers,
//!   queues, scenes) through [`zero_counter`].
//! - **HELP text.** `promtool check metrics` flags a metric without it, and a new
//!   operator reading `/metrics` should not need the source. [`register`] describes
//!   every metric of the component.
//!
//! `docs/metrics.md` lists the same names, types and labels (a test compares them), and
//! says more than the one line of HELP.
//!
//! Gauges are not registered here: a gauge at 0 before its owner has measured would
//! be a lie (a spool that holds bytes shown empty), so each owner sets its gauges from
//! what it measured, at start and on every change.

use metrics::{Key, KeyName, Label, SharedString};

/// A metric's Prometheus type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (`_total`).
    Counter,
    /// Set to what was measured.
    Gauge,
    /// Durations in seconds, buckets [`crate::admin::SECONDS_BUCKETS`].
    Histogram,
}

impl Kind {
    /// The type's name in Prometheus text format.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }
}

/// A label and its values: a fixed set, or (empty) values the owner's configuration
/// names at start (reward types, producers, queues, scenes, partitions).
pub type LabelSpec = (&'static str, &'static [&'static str]);

/// One metric.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    /// Full name, unit included (`_seconds`, `_bytes`, `_events`, `_total`).
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// One line for `# HELP`.
    pub help: &'static str,
    /// Its labels.
    pub labels: &'static [LabelSpec],
}

impl Metric {
    /// Whether every label's values are a fixed set (so [`register`] can make every
    /// series at 0).
    pub fn fixed(&self) -> bool {
        self.labels.iter().all(|(_, values)| !values.is_empty())
    }
}

/// The components, each a name prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// `reward_sdk_`: every process that links the SDK.
    Sdk,
    /// `reward_consumer_`.
    Consumer,
    /// `reward_service_`.
    Service,
    /// `reward_config_`: every process that watches dynamic settings.
    Config,
    /// `reward_redis_`: every process that loads a script.
    Redis,
    /// `reward_audit_`: `reward-ctl audit --every` (the live audit).
    Audit,
    /// `reward_agent_`: the reward agent (`reward-agent`).
    Agent,
}

impl Component {
    /// Every component.
    pub const ALL: [Self; 7] = [
        Self::Sdk,
        Self::Consumer,
        Self::Service,
        Self::Config,
        Self::Redis,
        Self::Audit,
        Self::Agent,
    ];

    /// Its metrics.
    pub fn metrics(self) -> &'static [Metric] {
        match self {
            Self::Sdk => SDK,
            Self::Consumer => CONSUMER,
            Self::Service => SERVICE,
            Self::Config => CONFIG,
            Self::Redis => REDIS,
            Self::Audit => AUDIT,
            Self::Agent => AGENT,
        }
    }
}

/// Every metric of every component.
pub fn all() -> impl Iterator<Item = &'static Metric> {
    Component::ALL.into_iter().flat_map(|c| c.metrics().iter())
}

/// The metric named `name`, if the catalogue has it.
pub fn find(name: &str) -> Option<&'static Metric> {
    all().find(|m| m.name == name)
}

const fn counter(name: &'static str, help: &'static str, labels: &'static [LabelSpec]) -> Metric {
    Metric {
        name,
        kind: Kind::Counter,
        help,
        labels,
    }
}

const fn gauge(name: &'static str, help: &'static str, labels: &'static [LabelSpec]) -> Metric {
    Metric {
        name,
        kind: Kind::Gauge,
        help,
        labels,
    }
}

const fn histogram(name: &'static str, help: &'static str, labels: &'static [LabelSpec]) -> Metric {
    Metric {
        name,
        kind: Kind::Histogram,
        help,
        labels,
    }
}

/// Values the owner's configuration names at start.
const RUNTIME: &[&str] = &[];

/// Outcomes of `send_reward` (`reward_sdk_calls_total{outcome}`).
pub const CALL_OUTCOMES: &[&str] = &[
    "accepted",
    "invalid",
    "backpressure",
    "too_many_tokens",
    "store_refused",
    "in_doubt",
    "seal_failed",
    "closed",
    "cancelled",
];

/// Which store held an accepted reward when `send_reward` answered
/// (`reward_sdk_answers_total{path}`; `sdk::HeldBy::label`).
pub const ANSWER_PATHS: &[&str] = &["stored", "queued", "spooled", "none"];

/// The reward service's APIs (`api` label).
pub const SERVICE_APIS: &[&str] = &["grant", "grant_async", "grant_batch", "withdraw", "sweeper"];

/// Grant outcomes (`outcome` label of `reward_service_grants_total`): the wire names.
pub const GRANT_OUTCOMES: &[&str] = &[
    "GRANTED",
    "ACCEPTED",
    "DUPLICATE",
    "CONFLICT",
    "RETRY_LATER",
    "BUDGET_EXHAUSTED",
    "FAILED_RETRYABLE",
    "FAILED_PERMANENT",
    "INVALID",
    "IN_DOUBT",
];

/// The SDK's metrics.
pub const SDK: &[Metric] = &[
    counter(
        "reward_sdk_calls_total",
        "send_reward calls by outcome: accepted (token stored per write mode, event queued) or why refused; in_doubt: refused with its event already on its way (most likely credited)",
        &[("outcome", CALL_OUTCOMES)],
    ),
    counter(
        "reward_sdk_answers_total",
        "accepted send_reward calls by the store that held the reward when the call answered: stored (Redis acknowledged the token), queued (a broker acknowledged the event first; the token write goes on), spooled (in the host's synced spool), none (opt-in modes that answer before a write lands)",
        &[("path", ANSWER_PATHS)],
    ),
    histogram(
        "reward_sdk_send_reward_seconds",
        "send_reward latency from call to answer, accepted or refused (SLO send_p99_ms)",
        &[],
    ),
    counter(
        "reward_sdk_tokens_stored_total",
        "reward tokens Redis acknowledged storing (with reward_sdk_calls_total{outcome=\"accepted\"}: the tokens-stored share)",
        &[],
    ),
    counter(
        "reward_sdk_sent_total",
        "events a broker acknowledged",
        &[("producer", RUNTIME)],
    ),
    histogram(
        "reward_sdk_send_seconds",
        "broker send latency of a batch",
        &[("producer", RUNTIME)],
    ),
    counter(
        "reward_sdk_failovers_total",
        "events that went to their second producer after the first failed",
        &[("from", RUNTIME)],
    ),
    counter(
        "reward_sdk_retries_total",
        "events handed to the retry loop",
        &[],
    ),
    counter(
        "reward_sdk_backpressure_total",
        "send_reward calls refused because the queue stayed full",
        &[("queue", RUNTIME)],
    ),
    gauge(
        "reward_sdk_buffer_events",
        "events accepted and not yet settled (on a broker, spooled or logged), all queues",
        &[],
    ),
    counter(
        "reward_sdk_spooled_total",
        "events written to the local spool because both brokers failed",
        &[],
    ),
    counter(
        "reward_sdk_replayed_total",
        "spooled events later delivered",
        &[],
    ),
    counter(
        "reward_sdk_logged_total",
        "events only logged because the spool failed too",
        &[],
    ),
    gauge(
        "reward_sdk_spool_bytes",
        "bytes waiting in the local spool",
        &[],
    ),
    counter(
        "reward_sdk_spool_torn_bytes_total",
        "bytes of a torn spool tail skipped at start",
        &[],
    ),
    counter(
        "reward_sdk_token_write_failures_total",
        "accepted rewards whose token will never be stored (writes given up or refused by Redis)",
        &[],
    ),
    counter(
        "reward_sdk_token_write_retries_total",
        "token write attempts that retried a failed or timed-out one",
        &[],
    ),
    counter(
        "reward_sdk_token_writes_refused_total",
        "send_reward calls refused because the token write failed for store.write_wait_ms (direct mode)",
        &[],
    ),
    counter(
        "reward_sdk_token_write_backlog_refusals_total",
        "send_reward calls refused because every store.max_pending place stayed taken",
        &[],
    ),
    gauge(
        "reward_sdk_token_writes_pending",
        "token writes Redis has not answered yet: queued, in flight or waiting for a retry",
        &[],
    ),
];

/// Reasons of `reward_consumer_requeued_total`.
pub const REQUEUE_REASONS: &[&str] = &["failed", "limited", "fused", "early", "direct"];
/// Reasons of `reward_consumer_dead_lettered_total`.
pub const DEAD_LETTER_REASONS: &[&str] = &["decode", "max_retries", "unproven"];
/// Reasons of `reward_consumer_failure_topic_total`.
pub const FAILURE_REASONS: &[&str] = &[
    "invalid",
    "unknown_type",
    "conflict",
    "budget_exhausted",
    "permanent",
    "expired",
];

/// The consumer's metrics.
pub const CONSUMER: &[Metric] = &[
    counter(
        "reward_consumer_consumed_total",
        "messages read from the broker",
        &[],
    ),
    counter(
        "reward_consumer_granted_total",
        "rewards credited through the reward service",
        &[("type", RUNTIME)],
    ),
    counter(
        "reward_consumer_duplicates_total",
        "messages whose trade number was already credited",
        &[],
    ),
    counter(
        "reward_consumer_failed_permanent_total",
        "grants refused for good (failure topic) and grants held in doubt",
        &[],
    ),
    counter(
        "reward_consumer_in_doubt_total",
        "grants the service holds IN_DOUBT for an operator",
        &[],
    ),
    counter(
        "reward_consumer_requeued_total",
        "messages parked for a retry or sent back to a queue",
        &[("reason", REQUEUE_REASONS)],
    ),
    counter(
        "reward_consumer_dead_lettered_total",
        "messages sent to the dead-letter topic",
        &[("reason", DEAD_LETTER_REASONS)],
    ),
    counter(
        "reward_consumer_failure_topic_total",
        "messages sent to the failure topic",
        &[("reason", FAILURE_REASONS)],
    ),
    counter(
        "reward_consumer_last_resort_total",
        "messages no queue accepted, logged as base64",
        &[("reason", &["requeue", "dead_letter"])],
    ),
    counter(
        "reward_consumer_decode_errors_total",
        "messages that did not decode",
        &[("reason", &["decode"])],
    ),
    counter(
        "reward_consumer_limiter_waits_total",
        "messages that waited for a rate limiter",
        &[],
    ),
    counter(
        "reward_consumer_moved_total",
        "parked messages moved back to their queue when due",
        &[],
    ),
    counter(
        "reward_consumer_service_errors_total",
        "GrantBatch calls that failed as a whole",
        &[],
    ),
    counter(
        "reward_consumer_fetch_errors_total",
        "broker fetch errors",
        &[],
    ),
    counter(
        "reward_consumer_commit_errors_total",
        "offset commits that failed",
        &[],
    ),
    counter(
        "reward_consumer_window_full_total",
        "times fetching paused on a full window",
        &[],
    ),
    counter(
        "reward_consumer_rocketmq_reconsume_total",
        "RocketMQ listener calls answered later",
        &[],
    ),
    gauge(
        "reward_consumer_assigned_partitions",
        "Kafka partitions this member holds; RocketMQ: queues it read from in the last 60 s",
        &[],
    ),
    gauge(
        "reward_consumer_in_flight_events",
        "events read and not yet settled (each event of a compound record counts)",
        &[],
    ),
    gauge(
        "reward_consumer_window_occupancy_messages",
        "broker records in flight in a partition's window",
        &[("topic", RUNTIME), ("partition", RUNTIME)],
    ),
    gauge(
        "reward_consumer_commit_lag_messages",
        "offsets (broker records) read but not yet committable",
        &[("topic", RUNTIME), ("partition", RUNTIME)],
    ),
    gauge(
        "reward_consumer_lag_records",
        "the partition's last offset on the broker minus the first offset not finished here (records; every 5 s)",
        &[("topic", RUNTIME), ("partition", RUNTIME)],
    ),
    gauge(
        "reward_consumer_lag_seconds",
        "how long the oldest record fetched and not settled here has been on the broker (0: none)",
        &[("topic", RUNTIME), ("partition", RUNTIME)],
    ),
    gauge(
        "reward_consumer_rate_limit_per_second",
        "the reward type's rate limit in effect (0 while fused)",
        &[("type", RUNTIME)],
    ),
    gauge(
        "reward_consumer_fused",
        "1 while the reward type is fused",
        &[("type", RUNTIME)],
    ),
    gauge(
        "reward_consumer_global_limit_per_second",
        "the global rate limit in effect",
        &[],
    ),
    gauge(
        "reward_consumer_fleet_live",
        "consumer instances leasing permits",
        &[],
    ),
    gauge(
        "reward_consumer_fleet_fallback",
        "1 while the last fleet lease failed and the instance refills itself",
        &[],
    ),
];

/// Results of the sweeper (`reward_service_sweeper_entries_total{result}`).
pub const SWEEP_RESULTS: &[&str] = &[
    "granted",
    "duplicate",
    "kept",
    "already_credited",
    "not_yet_stored",
    "never_stored",
    "illegal",
    "malformed",
    "expired",
    "unknown_type",
    "conflict",
    "invalid",
    "failed_permanent",
    "in_doubt",
];

/// Codes of `reward_service_events_refused_total`.
pub const REFUSAL_CODES: &[&str] = &[
    "PROOF_MISSING",
    "PROOF_UNKNOWN_KEY",
    "PROOF_FORGED",
    "EXPIRED",
    "UNKNOWN_REWARD_TYPE",
];

/// Codes of `reward_service_wallet_refused_total`.
pub const WALLET_REFUSALS: &[&str] = &[
    "unauthorized",
    "session_expired",
    "session_invalid",
    "session_other_user",
    "session_other_activity",
];

/// Results of `reward_service_budget_moves_total`.
pub const MOVE_RESULTS: &[&str] = &["moved", "refused", "lost"];

/// The reward service's metrics.
pub const SERVICE: &[Metric] = &[
    counter(
        "reward_service_grants_total",
        "grant results by API and outcome",
        &[("api", SERVICE_APIS), ("outcome", GRANT_OUTCOMES)],
    ),
    histogram(
        "reward_service_call_seconds",
        "gRPC call latency",
        &[("api", &["grant", "grant_async", "grant_batch"])],
    ),
    histogram(
        "reward_service_event_age_seconds",
        "end-to-end latency: the event's creation (its created_at_ms) to its credit, at the GRANTED answer (SLO end_to_end_p99_ms)",
        &[("api", SERVICE_APIS)],
    ),
    gauge(
        "reward_service_budget_spent",
        "spent of a configured budget",
        &[("scene", RUNTIME)],
    ),
    gauge(
        "reward_service_budget_remaining",
        "budget left of the live budget",
        &[("scene", RUNTIME)],
    ),
    counter(
        "reward_service_budget_moves_total",
        "unspent budget moved between shards of a scene, by result",
        &[("result", MOVE_RESULTS)],
    ),
    gauge(
        "reward_service_in_doubt",
        "grants held IN_DOUBT: credits whose outcome is unknown (reward-ctl in-doubt)",
        &[],
    ),
    counter(
        "reward_service_token_moves_retried_total",
        "credited tokens whose move out of the pending hash succeeded on a background retry",
        &[],
    ),
    counter(
        "reward_service_sweeper_entries_total",
        "due index entries the sweeper settled or looked at, by result",
        &[("result", SWEEP_RESULTS)],
    ),
    counter(
        "reward_service_events_refused_total",
        "events refused before any claim: no valid proof, expired, or an unknown reward type",
        &[("code", REFUSAL_CODES)],
    ),
    counter(
        "reward_service_events_unproven_accepted_total",
        "events without a proof credited inside an unproven = \"accept\" window",
        &[],
    ),
    counter(
        "reward_service_wallet_refused_total",
        "wallet calls refused 401, by code",
        &[("code", WALLET_REFUSALS)],
    ),
    counter(
        "reward_service_replica_waits_total",
        "claim calls that waited for a replica",
        &[],
    ),
    counter(
        "reward_service_not_replicated_total",
        "claim calls no replica acknowledged in time (nothing credited, grants retried)",
        &[],
    ),
    counter(
        "reward_service_unreadable_records_total",
        "claim-store keys the scripts could not read (a record not in the record format; a key of another type under a record's, budget's or index's name); their grants failed, nothing credited",
        &[],
    ),
];

/// Dynamic settings' metrics.
pub const CONFIG: &[Metric] = &[
    counter(
        "reward_config_changes_total",
        "dynamic config documents applied",
        &[],
    ),
    counter(
        "reward_config_rejected_total",
        "dynamic config documents refused (old settings kept)",
        &[],
    ),
    counter(
        "reward_config_read_errors_total",
        "dynamic config reads that failed",
        &[],
    ),
];

/// Redis clients' metrics.
pub const REDIS: &[Metric] = &[counter(
    "reward_redis_replies_out_of_step_total",
    "script replies refused because they carried another call's tag (the call is in doubt)",
    &[],
)];

/// Outcomes of `reward_agent_rewards_total`: `issued`, or the refusal's code
/// (`reward.v1.AgentErrorCode`, lower case).
pub const AGENT_OUTCOMES: &[&str] = &[
    "issued",
    "invalid_reward",
    "unknown_reward_type",
    "backpressure",
    "too_many_tokens",
    "closing",
    "store_failed",
    "sent_in_doubt",
    "seal_failed",
];

/// The reward agent's own metrics (the SDK inside it exports `reward_sdk_*`).
pub const AGENT: &[Metric] = &[counter(
    "reward_agent_rewards_total",
    "rewards the agent answered: issued, or the refusal's code",
    &[("outcome", AGENT_OUTCOMES)],
)];

/// Kinds of `reward_audit_findings` (`reward_tools::audit::Kind`).
pub const AUDIT_KINDS: &[&str] = &[
    "granted_without_receipt",
    "spent_below_claims",
    "spent_above_claims",
    "credited_token_pending",
    "stale_due_entry",
    "in_doubt_past_hold",
];

/// The live audit's metrics (`reward-ctl audit --every N --metrics-addr A`).
pub const AUDIT: &[Metric] = &[
    gauge(
        "reward_audit_findings",
        "inconsistencies the last audit found in the books, by kind",
        &[("kind", AUDIT_KINDS)],
    ),
    counter("reward_audit_runs_total", "audits completed", &[]),
    counter(
        "reward_audit_failures_total",
        "audits that could not complete (Redis failed)",
        &[],
    ),
    counter(
        "reward_audit_claims_read_total",
        "claim records the audits read",
        &[],
    ),
    gauge(
        "reward_audit_busy_shards",
        "budget shards the last audit could not judge because they changed during its walk",
        &[],
    ),
    gauge(
        "reward_audit_last_run_timestamp_seconds",
        "Unix time the last audit completed",
        &[],
    ),
    histogram("reward_audit_run_seconds", "wall time of an audit", &[]),
];

/// Describes every metric of `component` to the installed recorder and registers its
/// counters and histograms at 0 for every combination of fixed label values (a metric
/// with a label whose values come from configuration is left to its owner:
/// [`zero_counter`]). Call it after the recorder is installed; calling it again is
/// harmless.
///
/// ```
/// use reward_runtime::catalogue::{Component, register};
/// register(Component::Config); // no recorder installed here: a no-op
/// ```
pub fn register(component: Component) {
    metrics::with_recorder(|r| {
        for m in component.metrics() {
            let name = KeyName::from_const_str(m.name);
            let help = SharedString::const_str(m.help);
            match m.kind {
                Kind::Counter => r.describe_counter(name, None, help),
                Kind::Gauge => r.describe_gauge(name, None, help),
                Kind::Histogram => r.describe_histogram(name, None, help),
            }
            if !m.fixed() || m.kind == Kind::Gauge {
                continue;
            }
            for labels in combinations(m.labels) {
                let key = Key::from_parts(m.name, labels);
                match m.kind {
                    Kind::Counter => r.register_counter(&key, &metadata()).increment(0),
                    Kind::Histogram => {
                        // Registering makes the series; no value is recorded.
                        let _ = r.register_histogram(&key, &metadata());
                    }
                    Kind::Gauge => {}
                }
            }
        }
    });
}

/// Registers the counter `name` at 0 labelled `label = value` for each value (the
/// label values a process's configuration names: reward types, producers, queues).
pub fn zero_counter<'a>(
    name: &'static str,
    label: &'static str,
    values: impl IntoIterator<Item = &'a str>,
) {
    metrics::with_recorder(|r| {
        for v in values {
            let key = Key::from_parts(name, vec![Label::new(label, v.to_string())]);
            r.register_counter(&key, &metadata()).increment(0);
        }
    });
}

/// Every combination of the labels' values (one empty combination for no labels).
fn combinations(labels: &[LabelSpec]) -> Vec<Vec<Label>> {
    let mut out: Vec<Vec<Label>> = vec![Vec::new()];
    for (name, values) in labels {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                values.iter().map(move |v| {
                    let mut l = prefix.clone();
                    l.push(Label::from_static_parts(name, v));
                    l
                })
            })
            .collect();
    }
    out
}

fn metadata() -> metrics::Metadata<'static> {
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_carry_their_component_and_unit() {
        let mut seen = std::collections::BTreeSet::new();
        for c in Component::ALL {
            let prefix = match c {
                Component::Sdk => "reward_sdk_",
                Component::Consumer => "reward_consumer_",
                Component::Service => "reward_service_",
                Component::Config => "reward_config_",
                Component::Redis => "reward_redis_",
                Component::Audit => "reward_audit_",
                Component::Agent => "reward_agent_",
            };
            for m in c.metrics() {
                assert!(seen.insert(m.name), "{} listed twice", m.name);
                assert!(m.name.starts_with(prefix), "{} is not {prefix}", m.name);
                assert_eq!(
                    m.kind == Kind::Counter,
                    m.name.ends_with("_total"),
                    "{}",
                    m.name
                );
                if m.kind == Kind::Histogram {
                    assert!(m.name.ends_with("_seconds"), "{}", m.name);
                }
                assert!(!m.help.is_empty() && !m.help.contains('\n'), "{}", m.name);
            }
        }
    }

    #[test]
    fn combinations_cover_every_pair_of_values() {
        let c = combinations(&[("a", &["1", "2"]), ("b", &["x", "y", "z"])]);
        assert_eq!(c.len(), 6);
        assert_eq!(combinations(&[]).len(), 1);
    }

    #[test]
    fn register_makes_every_fixed_series_at_zero_with_help() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            for c in Component::ALL {
                register(c);
            }
            zero_counter("reward_sdk_sent_total", "producer", ["kafka"]);
        });
        let text = handle.render();
        for m in all().filter(|m| m.fixed() && m.kind != Kind::Gauge) {
            assert!(
                text.contains(&format!("# HELP {} ", m.name)),
                "no HELP for {}",
                m.name
            );
        }
        assert!(text.contains("reward_sdk_calls_total{outcome=\"store_refused\"} 0"));
        assert!(
            text.contains("reward_service_grants_total{api=\"sweeper\",outcome=\"IN_DOUBT\"} 0")
        );
        assert!(text.contains("reward_sdk_sent_total{producer=\"kafka\"} 0"));
        assert!(
            text.contains("reward_sdk_send_reward_seconds_count 0"),
            "{text}"
        );
    }
}
