//! The pipe's encoding.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use sdk::request::{RewardRequest, User};

use super::wire::WireRequest;

#[test]
fn a_request_crosses_the_pipe_unchanged() {
    let r = RewardRequest {
        trade_no: "t-1".into(),
        user: User {
            user_id: "u\t1".into(),
            device_id: "d".into(),
            app_id: "a".into(),
        },
        activity_id: "act".into(),
        scene_id: "scene".into(),
        reward_type: "cash".into(),
        amount: 42,
        description: "line\nbreak".into(),
        extension: [("k".to_string(), "v".to_string())].into(),
    };
    let line = serde_json::to_string(&WireRequest::new(7, r.clone())).unwrap();
    assert!(!line.contains('\n'));
    let back: WireRequest = serde_json::from_str(&line).unwrap();
    let (id, back) = back.into_request();
    assert_eq!(id, 7);
    assert_eq!(back, r);
}
