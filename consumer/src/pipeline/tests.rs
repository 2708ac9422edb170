//! Unit tests of the pipeline's own helpers (the GrantBatch retry wait), and of the
//! grant call and the settling of its results against an in-memory reward service
//! ([`FakeGrant`]): no service, no Redis, no broker. Where the GrantBatch backoff is
//! the subject, the clock is tokio's, paused.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use proto::reasons::DeadLetterReason;
use proto::v1::{GrantBatchRequest, GrantBatchResponse, GrantOutcome, GrantResult, RewardEvent};
use tonic::metadata::{Ascii, MetadataValue};

use super::grant::{BoxFuture, GRANT_ATTEMPTS, GrantClient, grant_answers, grant_backoff};
use super::settle::{Done, Fate, fate};
use super::stats::Stats;
use crate::config::PipelineConfig;

#[test]
fn grant_retries_wait_with_jitter_within_bounds() {
    for attempt in 0..GRANT_ATTEMPTS {
        let base = 500 * u64::from(attempt + 1);
        let waits: Vec<u128> = (0..200)
            .map(|_| grant_backoff(attempt).as_millis())
            .collect();
        let (lo, hi) = (u128::from(base / 2), u128::from(base * 3 / 2));
        assert!(waits.iter().all(|w| (lo..=hi).contains(w)), "{waits:?}");
        assert!(waits.iter().any(|w| *w != waits[0]), "no jitter");
    }
}

/// The reward service's `GrantBatch`, answered from memory.
///
/// Each event gets the result scripted for its trade number ([`FakeGrant::answer`]),
/// GRANTED when none is; knobs: the next calls fail with a status
/// ([`FakeGrant::fail_next`]), results come back in another order
/// ([`FakeGrant::reverse`]) or fewer than the events ([`FakeGrant::drop_last`]).
/// Every request is kept, to check what was sent and how often.
#[derive(Debug, Default)]
struct FakeGrant {
    state: Mutex<FakeState>,
}

#[derive(Debug, Default)]
struct FakeState {
    scripted: BTreeMap<String, GrantResult>,
    failures: VecDeque<tonic::Status>,
    reverse: bool,
    drop_last: usize,
    calls: Vec<(GrantBatchRequest, Option<String>)>,
}

impl FakeGrant {
    fn answer(&self, trade_no: &str, outcome: GrantOutcome, code: &str, retry_after_ms: i64) {
        self.state.lock().unwrap().scripted.insert(
            trade_no.to_string(),
            GrantResult {
                trade_no: trade_no.to_string(),
                outcome: outcome as i32,
                error_code: code.to_string(),
                retry_after_ms,
                ..Default::default()
            },
        );
    }

    fn fail_next(&self, status: tonic::Status) {
        self.state.lock().unwrap().failures.push_back(status);
    }

    fn reverse(&self) {
        self.state.lock().unwrap().reverse = true;
    }

    fn drop_last(&self, n: usize) {
        self.state.lock().unwrap().drop_last = n;
    }

    fn calls(&self) -> usize {
        self.state.lock().unwrap().calls.len()
    }
}

impl GrantClient for FakeGrant {
    fn grant_batch(
        &self,
        req: tonic::Request<GrantBatchRequest>,
    ) -> BoxFuture<'_, Result<GrantBatchResponse, tonic::Status>> {
        let auth = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let req = req.into_inner();
        let mut s = self.state.lock().unwrap();
        s.calls.push((req.clone(), auth));
        let out = match s.failures.pop_front() {
            Some(status) => Err(status),
            None => {
                let mut results: Vec<GrantResult> = req
                    .events
                    .iter()
                    .map(|e| {
                        s.scripted.get(&e.trade_no).cloned().unwrap_or(GrantResult {
                            trade_no: e.trade_no.clone(),
                            outcome: GrantOutcome::Granted as i32,
                            ..Default::default()
                        })
                    })
                    .collect();
                if s.reverse {
                    results.reverse();
                }
                let keep = results.len().saturating_sub(s.drop_last);
                results.truncate(keep);
                Ok(GrantBatchResponse { results })
            }
        };
        Box::pin(async move { out })
    }
}

fn event(trade_no: &str, retry_count: u32) -> RewardEvent {
    RewardEvent {
        trade_no: trade_no.to_string(),
        reward_type: "cash".into(),
        amount: 1,
        retry_count,
        ..Default::default()
    }
}

fn auth() -> MetadataValue<Ascii> {
    "Bearer unit".parse().unwrap()
}

/// The grant call for `events`, then each event's fate: what `settle` carries out.
async fn fates(
    client: &FakeGrant,
    cfg: &PipelineConfig,
    events: &[RewardEvent],
    stats: &Stats,
) -> Vec<Fate> {
    let refs: Vec<&RewardEvent> = events.iter().collect();
    let answers = grant_answers(client, &refs, &auth(), Duration::from_secs(5), stats).await;
    assert_eq!(answers.len(), events.len());
    events
        .iter()
        .zip(answers)
        .map(|(e, r)| fate(cfg, e, r))
        .collect()
}

fn letter(reason: DeadLetterReason, code: &str) -> Fate {
    Fate::Letter {
        reason,
        code: code.to_string(),
    }
}

fn retry(retry_count: u32, ms: u64) -> Fate {
    Fate::Retry {
        retry_count,
        delay: Duration::from_millis(ms),
    }
}

#[tokio::test(start_paused = true)]
async fn every_outcome_ends_where_the_table_says() {
    let cfg = PipelineConfig {
        max_retries: 3,
        backoff_initial_ms: 500,
        backoff_max_ms: 60_000,
        ..PipelineConfig::default()
    };
    let g = FakeGrant::default();
    use GrantOutcome as O;
    // (trade number, retry count so far, outcome, error code, retry_after_ms, fate)
    let table: Vec<(&str, u32, GrantOutcome, &str, i64, Fate)> = vec![
        ("granted", 0, O::Granted, "", 0, Fate::Done(Done::Granted)),
        ("accepted", 0, O::Accepted, "", 0, Fate::Done(Done::Granted)),
        ("dup", 0, O::Duplicate, "", 0, Fate::Done(Done::Duplicate)),
        ("doubt", 0, O::InDoubt, "", 0, Fate::Done(Done::InDoubt)),
        (
            "perm",
            0,
            O::FailedPermanent,
            "X",
            0,
            Fate::Done(Done::FailedPermanent),
        ),
        (
            "expired",
            0,
            O::Invalid,
            "EXPIRED",
            0,
            letter(DeadLetterReason::Expired, "EXPIRED"),
        ),
        (
            "sig",
            0,
            O::Invalid,
            "PROOF_BAD_SIGNATURE",
            0,
            letter(DeadLetterReason::Unproven, "PROOF_BAD_SIGNATURE"),
        ),
        (
            "noproof",
            0,
            O::Invalid,
            "PROOF_MISSING",
            0,
            letter(DeadLetterReason::Unproven, "PROOF_MISSING"),
        ),
        (
            "amount",
            0,
            O::Invalid,
            "AMOUNT",
            0,
            letter(DeadLetterReason::Invalid, "AMOUNT"),
        ),
        (
            "conflict",
            0,
            O::Conflict,
            "CONFLICT",
            0,
            letter(DeadLetterReason::Conflict, "CONFLICT"),
        ),
        (
            "budget",
            0,
            O::BudgetExhausted,
            "BUDGET",
            0,
            letter(DeadLetterReason::BudgetExhausted, "BUDGET"),
        ),
        // The backoff of retry 1 (500 ms) unless the service asks for longer.
        ("later", 0, O::RetryLater, "", 0, retry(1, 500)),
        ("later-hint", 0, O::RetryLater, "", 7_000, retry(1, 7_000)),
        (
            "retryable",
            1,
            O::FailedRetryable,
            "DOWNSTREAM",
            100,
            retry(2, 1_000),
        ),
        ("unspecified", 2, O::Unspecified, "", 0, retry(3, 2_000)),
        // Past max_retries: a dead letter under the outcome's name, count unchanged.
        (
            "spent",
            3,
            O::RetryLater,
            "",
            0,
            letter(DeadLetterReason::MaxRetries, "RETRY_LATER"),
        ),
        (
            "spent-code",
            3,
            O::FailedRetryable,
            "DOWNSTREAM",
            0,
            letter(DeadLetterReason::MaxRetries, "DOWNSTREAM"),
        ),
    ];
    for (t, _, o, code, after, _) in &table {
        g.answer(t, *o, code, *after);
    }
    let events: Vec<RewardEvent> = table.iter().map(|(t, n, ..)| event(t, *n)).collect();
    let stats = Stats::new();
    let got = fates(&g, &cfg, &events, &stats).await;
    for ((t, .., want), got) in table.iter().zip(&got) {
        assert_eq!(got, want, "{t}");
    }
    assert_eq!(g.calls(), 1);
    assert_eq!(stats.snapshot().service_errors, 0);
    // Counts by end: 5 done, 8 letters (2 past max_retries), 4 parked.
    let done = got.iter().filter(|f| matches!(f, Fate::Done(_))).count();
    let letters = got
        .iter()
        .filter(|f| matches!(f, Fate::Letter { .. }))
        .count();
    let parked = got
        .iter()
        .filter(|f| matches!(f, Fate::Retry { .. }))
        .count();
    assert_eq!((done, letters, parked), (5, 8, 4));
    // What went out: every event, once, proof required, with the credential.
    let s = g.state.lock().unwrap();
    let (req, auth) = &s.calls[0];
    assert!(req.require_proof);
    assert_eq!(req.events, events);
    assert_eq!(auth.as_deref(), Some("Bearer unit"));
}

#[tokio::test(start_paused = true)]
async fn a_transport_error_then_success_grants_after_one_backoff() {
    let g = FakeGrant::default();
    g.fail_next(tonic::Status::unavailable("connection refused"));
    let events: Vec<RewardEvent> = (0..5).map(|i| event(&format!("t{i}"), 0)).collect();
    let stats = Stats::new();
    let t0 = tokio::time::Instant::now();
    let got = fates(&g, &PipelineConfig::default(), &events, &stats).await;
    let waited = t0.elapsed();
    assert!(
        got.iter().all(|f| *f == Fate::Done(Done::Granted)),
        "{got:?}"
    );
    assert_eq!(g.calls(), 2);
    assert_eq!(stats.snapshot().service_errors, 1);
    // grant_backoff(0): 500 ms ± 50 %.
    assert!(
        (Duration::from_millis(250)..=Duration::from_millis(750)).contains(&waited),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_service_down_for_every_attempt_parks_every_event_for_a_retry() {
    let g = FakeGrant::default();
    for _ in 0..GRANT_ATTEMPTS {
        g.fail_next(tonic::Status::unavailable("down"));
    }
    let events: Vec<RewardEvent> = (0..4).map(|i| event(&format!("t{i}"), 0)).collect();
    let stats = Stats::new();
    let t0 = tokio::time::Instant::now();
    let got = fates(&g, &PipelineConfig::default(), &events, &stats).await;
    let waited = t0.elapsed();
    assert!(got.iter().all(|f| *f == retry(1, 500)), "{got:?}");
    assert_eq!(g.calls(), GRANT_ATTEMPTS as usize);
    assert_eq!(stats.snapshot().service_errors, u64::from(GRANT_ATTEMPTS));
    // Two waits, after attempts 0 and 1 (none after the last): 250..=750 + 500..=1500.
    assert!(
        (Duration::from_millis(750)..=Duration::from_millis(2_250)).contains(&waited),
        "{waited:?}"
    );
    // An event already at its last retry goes to the dead letters instead.
    let cfg = PipelineConfig {
        max_retries: 1,
        ..PipelineConfig::default()
    };
    for _ in 0..GRANT_ATTEMPTS {
        g.fail_next(tonic::Status::unavailable("down"));
    }
    let got = fates(&g, &cfg, &[event("last", 1)], &stats).await;
    assert_eq!(
        got,
        [letter(DeadLetterReason::MaxRetries, "SERVICE_UNAVAILABLE")]
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_credential_or_request_is_not_called_again() {
    for status in [
        tonic::Status::unauthenticated("bad token"),
        tonic::Status::invalid_argument("too big"),
    ] {
        let g = FakeGrant::default();
        g.fail_next(status);
        let stats = Stats::new();
        let t0 = tokio::time::Instant::now();
        let got = fates(&g, &PipelineConfig::default(), &[event("t", 0)], &stats).await;
        assert_eq!(got, [retry(1, 500)]);
        assert_eq!(g.calls(), 1);
        assert_eq!(t0.elapsed(), Duration::ZERO, "no backoff");
    }
}

#[tokio::test(start_paused = true)]
async fn results_out_of_place_or_missing_count_as_no_answer() {
    let events: Vec<RewardEvent> = (0..4).map(|i| event(&format!("t{i}"), 0)).collect();
    // Fewer results than events: the last ones had no answer.
    let g = FakeGrant::default();
    g.drop_last(2);
    let got = fates(&g, &PipelineConfig::default(), &events, &Stats::new()).await;
    let granted = Fate::Done(Done::Granted);
    assert_eq!(
        got,
        [granted.clone(), granted, retry(1, 500), retry(1, 500)]
    );
    // Results in another order than the events: none is taken for another event's.
    let g = FakeGrant::default();
    g.reverse();
    let got = fates(&g, &PipelineConfig::default(), &events, &Stats::new()).await;
    assert!(got.iter().all(|f| *f == retry(1, 500)), "{got:?}");
    assert_eq!(g.calls(), 1);
}
