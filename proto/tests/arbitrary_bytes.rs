//! Arbitrary and edited bytes into every decoder of outside input in this crate: the
//! event and dead-letter decoders (what the consumer reads from brokers), the token
//! plaintext and the id rule applied after. A typed error or a value, never a panic.
//!
//! `FUZZ_CASES` sets the number of cases (10 000 000 for the long runs reported in
//! BENCHMARKS.md, in a release build); the test suite runs a short one.

use proptest::prelude::*;
use prost::Message;
use proto::v1::{DeadLetter, RewardEvent, RewardToken, UserInfo};

/// A valid event's bytes, to edit.
fn seed() -> Vec<u8> {
    RewardEvent {
        trade_no: "cny:rain:1:u42".into(),
        user: Some(UserInfo {
            user_id: "u42".into(),
            device_id: "d".into(),
            app_id: "a".into(),
        }),
        activity_id: "cny".into(),
        scene_id: "rain".into(),
        reward_type: "cash".into(),
        amount: 888,
        extension: [("k".to_string(), "v".to_string())].into_iter().collect(),
        retry_count: 3,
        created_at_ms: 1_700_000_000_000,
        description: "lucky".into(),
        not_before_ms: 5,
        expires_at_ms: 1_700_000_600_000,
        proof: vec![1; proto::limits::PROOF_LEN],
    }
    .encode_to_vec()
}

fn decode_all(bytes: &[u8]) {
    if let Ok(ev) = RewardEvent::decode(bytes) {
        let _ = proto::ids::check_event(&ev);
        let _ = proto::limits::check_event(&ev);
        let _ = proto::limits::check_not_before(&ev, 1_700_000_000_000);
        let _ = proto::limits::check_created(&ev, 1_700_000_000_000);
    }
    if let Ok(dl) = DeadLetter::decode(bytes)
        && let Some(ev) = dl.event
    {
        let _ = proto::ids::check_event(&ev);
    }
    if let Ok(t) = RewardToken::decode(bytes) {
        let _ = proto::ids::check_token(&t);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proto::edits::cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        decode_all(&bytes);
    }

    #[test]
    fn edited_events_decode_or_fail_cleanly(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..8),
    ) {
        let mut bytes = seed();
        proto::edits::apply(&mut bytes, &edits);
        decode_all(&bytes);
        // A dead letter wrapping the edited bytes as its raw payload decodes to them.
        let dl = DeadLetter { raw: bytes.clone(), ..Default::default() };
        let back = DeadLetter::decode(dl.encode_to_vec().as_slice()).map(|d| d.raw);
        prop_assert_eq!(back.ok(), Some(bytes));
    }
}
