//! The pipe's encoding and the marks file.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use sdk::request::{RewardRequest, User};

use super::marks::{MARKS, Marks, read_marks};
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

#[test]
fn marks_parse_and_bad_lines_are_refused() {
    let dir = std::env::temp_dir().join(format!("hosts-marks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert_eq!(read_marks(&dir).unwrap(), Marks::default());
    std::fs::write(
        dir.join(MARKS),
        "a\taccepted\nb\tin_doubt\n#bound\t3\nc\taccepted\n#bound\t4\n",
    )
    .unwrap();
    let m = read_marks(&dir).unwrap();
    assert_eq!(m.rewards.get("a"), Some(&true));
    assert_eq!(m.rewards.get("b"), Some(&false));
    assert_eq!((m.rewards.len(), m.bound), (3, 7));
    std::fs::write(dir.join(MARKS), "a\tmaybe\n").unwrap();
    assert!(read_marks(&dir).is_err());
    std::fs::write(dir.join(MARKS), "#bound\tmany\n").unwrap();
    assert!(read_marks(&dir).is_err());
    std::fs::write(dir.join(MARKS), "no-tab\n").unwrap();
    assert!(read_marks(&dir).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
