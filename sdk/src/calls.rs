//! What `send_reward` answered, counted and timed for the SLOs an activity service
//! answers for: the share of calls accepted (`reward_sdk_calls_total{outcome}`), the
//! call's latency from call to answer (`reward_sdk_send_reward_seconds`); accepted
//! calls by the store that held the reward (`reward_sdk_answers_total{path}`); the token
//! store counts the tokens Redis acknowledged (`reward_sdk_tokens_stored_total`,
//! beside the accepted calls: the tokens-stored share).
//!
//! The handles are process-wide (one set however many SDKs a process starts, as the
//! recorder is) and registered once, so counting a call is two atomic adds and one
//! histogram record. A call whose future the caller dropped before its answer (the
//! caller's own timeout, a client gone) is counted `cancelled` and timed up to the
//! drop: those are the slowest calls, and a latency SLO that left them out would
//! stay green while every caller gave up. Its reward may still go on (the event of a
//! token write in flight is sent anyway), so it counts against the accepted share as
//! a call whose caller never heard the answer.

use std::sync::LazyLock;
use std::time::Instant;

use reward_runtime::catalogue::{ANSWER_PATHS, CALL_OUTCOMES};
use reward_runtime::counters::{Counted, Timing};

use crate::error::SendError;
use crate::issued::IssuedToken;

/// Calls by outcome, in [`CALL_OUTCOMES`] order.
static CALLS: LazyLock<Vec<Counted>> = LazyLock::new(|| {
    CALL_OUTCOMES
        .iter()
        .map(|o| Counted::new("reward_sdk_calls_total", &[("outcome", o)]))
        .collect()
});

/// Accepted calls by the store that held the reward, in [`ANSWER_PATHS`] order.
static PATHS: LazyLock<Vec<Counted>> = LazyLock::new(|| {
    ANSWER_PATHS
        .iter()
        .map(|p| Counted::new("reward_sdk_answers_total", &[("path", p)]))
        .collect()
});

static LATENCY: LazyLock<Timing> = LazyLock::new(|| Timing::new("reward_sdk_send_reward_seconds"));

/// One `send_reward` call being timed: answered, or counted `cancelled` when dropped
/// first.
pub(crate) struct Call {
    started: Instant,
    answered: bool,
}

impl Call {
    pub(crate) fn start() -> Self {
        Self {
            started: Instant::now(),
            answered: false,
        }
    }

    /// Counts and times the call by its answer.
    pub(crate) fn answered(mut self, answer: &Result<IssuedToken, SendError>) {
        self.answered = true;
        record(self.started, outcome_of(answer));
        if let Ok(t) = answer
            && let Some(c) = ANSWER_PATHS
                .iter()
                .position(|p| *p == t.held_by.label())
                .and_then(|i| PATHS.get(i))
        {
            c.inc();
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if !self.answered {
            record(self.started, "cancelled");
        }
    }
}

/// The outcome label of an answer (one of [`CALL_OUTCOMES`]).
pub(crate) fn outcome_of(answer: &Result<IssuedToken, SendError>) -> &'static str {
    match answer {
        Ok(_) => "accepted",
        Err(SendError::Invalid(_)) => "invalid",
        Err(SendError::Backpressure(_)) => "backpressure",
        Err(SendError::TooManyTokens { .. }) => "too_many_tokens",
        Err(SendError::Store(_)) => "store_refused",
        Err(SendError::InDoubt(_)) => "in_doubt",
        Err(SendError::Seal(_)) => "seal_failed",
        Err(SendError::Closed) => "closed",
    }
}

/// Counts and times one call.
fn record(started: Instant, outcome: &str) {
    LATENCY.record(started.elapsed().as_secs_f64());
    if let Some(c) = CALL_OUTCOMES
        .iter()
        .position(|o| *o == outcome)
        .and_then(|i| CALLS.get(i))
    {
        c.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(outcome: &str) -> u64 {
        let i = CALL_OUTCOMES.iter().position(|o| *o == outcome).unwrap();
        CALLS[i].get()
    }

    #[test]
    fn a_call_dropped_before_its_answer_counts_cancelled_and_an_answered_one_does_not() {
        let before = count("cancelled");
        drop(Call::start());
        assert!(count("cancelled") > before);
        let (cancelled, closed) = (count("cancelled"), count("closed"));
        Call::start().answered(&Err(SendError::Closed));
        assert!(count("closed") > closed);
        // No other unit test of this crate drops a call: an answered call is not also
        // counted cancelled.
        assert_eq!(count("cancelled"), cancelled);
    }

    #[test]
    fn every_outcome_is_a_listed_label_value() {
        let answers: Vec<Result<IssuedToken, SendError>> = vec![
            Err(SendError::Closed),
            Err(SendError::TooManyTokens { cap: 1 }),
            Err(SendError::Store(crate::store::StoreError::Closed)),
            Err(SendError::InDoubt(crate::store::StoreError::Closed)),
        ];
        for a in &answers {
            assert!(CALL_OUTCOMES.contains(&outcome_of(a)));
        }
    }
}
