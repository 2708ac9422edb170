//! Any value of the wire types survives encode → decode unchanged.

// Test code: a failed unwrap is a failed test, which is what we want (helpers too,
// which clippy's allow-unwrap-in-tests does not cover).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use proptest::prelude::*;
use prost::Message;
use proto::v1::{
    DeadLetter, GrantBatchResponse, GrantOutcome, GrantResult, RewardEvent, RewardToken, UserInfo,
};

fn token() -> impl Strategy<Value = RewardToken> {
    (
        (".{0,40}", ".{0,20}", ".{0,20}", ".{0,20}", ".{0,12}"),
        (
            any::<i64>(),
            any::<i64>(),
            ".{0,60}",
            any::<i64>(),
            ".{0,12}",
        ),
    )
        .prop_map(
            |(
                (trade_no, user_id, activity_id, scene_id, reward_type),
                (amount, grant_time_ms, description, expires_at_ms, app_id),
            )| {
                RewardToken {
                    trade_no,
                    user_id,
                    activity_id,
                    scene_id,
                    reward_type,
                    amount,
                    grant_time_ms,
                    description,
                    expires_at_ms,
                    app_id,
                }
            },
        )
}

fn event() -> impl Strategy<Value = RewardEvent> {
    (
        token(),
        proptest::option::of((".{0,20}", ".{0,20}", ".{0,20}")),
        proptest::collection::hash_map(".{0,8}", ".{0,16}", 0..6),
        any::<u32>(),
        any::<i64>(),
        proptest::collection::vec(any::<u8>(), 0..24),
    )
        .prop_map(
            |(t, user, extension, retry_count, not_before_ms, proof): (
                _,
                _,
                HashMap<String, String>,
                _,
                _,
                _,
            )| RewardEvent {
                trade_no: t.trade_no,
                user: user.map(|(user_id, device_id, app_id)| UserInfo {
                    user_id,
                    device_id,
                    app_id,
                }),
                activity_id: t.activity_id,
                scene_id: t.scene_id,
                reward_type: t.reward_type,
                amount: t.amount,
                extension,
                retry_count,
                created_at_ms: t.grant_time_ms,
                description: t.description,
                not_before_ms,
                expires_at_ms: t.expires_at_ms,
                proof,
            },
        )
}

proptest! {
    #[test]
    fn token_roundtrips(t in token()) {
        prop_assert_eq!(RewardToken::decode(t.encode_to_vec().as_slice())?, t);
    }

    #[test]
    fn event_roundtrips(e in event()) {
        prop_assert_eq!(RewardEvent::decode(e.encode_to_vec().as_slice())?, e);
    }

    #[test]
    fn dead_letter_keeps_raw_bytes(e in proptest::option::of(event()), raw in proptest::collection::vec(any::<u8>(), 0..256)) {
        let dl = DeadLetter { event: e, raw, reason: "decode".into(), ..Default::default() };
        prop_assert_eq!(DeadLetter::decode(dl.encode_to_vec().as_slice())?, dl);
    }
}

#[test]
fn batch_results_keep_order_and_outcomes() {
    let outcomes = [
        GrantOutcome::Granted,
        GrantOutcome::Duplicate,
        GrantOutcome::Conflict,
        GrantOutcome::RetryLater,
        GrantOutcome::BudgetExhausted,
        GrantOutcome::FailedPermanent,
    ];
    let resp = GrantBatchResponse {
        results: outcomes
            .iter()
            .enumerate()
            .map(|(i, o)| GrantResult {
                trade_no: format!("t{i}"),
                outcome: *o as i32,
                ..Default::default()
            })
            .collect(),
    };
    let back = GrantBatchResponse::decode(resp.encode_to_vec().as_slice()).unwrap();
    let got: Vec<_> = back
        .results
        .iter()
        .map(|r| (r.trade_no.clone(), r.outcome()))
        .collect();
    let want: Vec<_> = outcomes
        .iter()
        .enumerate()
        .map(|(i, o)| (format!("t{i}"), *o))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn unknown_outcome_number_decodes_as_unspecified_not_panic() {
    // A newer service may send an outcome this build does not know.
    let r = GrantResult {
        outcome: 999,
        ..Default::default()
    };
    let back = GrantResult::decode(r.encode_to_vec().as_slice()).unwrap();
    assert_eq!(back.outcome, 999);
    assert_eq!(back.outcome(), GrantOutcome::Unspecified);
}
