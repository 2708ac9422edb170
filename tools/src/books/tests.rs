//! The books' pure parts: the sent list, the retry rule.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

#[test]
fn only_a_store_that_did_not_answer_is_asked_again() {
    for text in [
        "token store: Timeout Error: Request timed out.",
        "ledger: IO",
        "claim store: x",
    ] {
        assert!(unanswered(&anyhow::anyhow!("{text}")), "{text}");
    }
    for text in [
        "nothing to reconcile: the run was cleaned",
        "manifest.json: not found",
    ] {
        assert!(!unanswered(&anyhow::anyhow!("{text}")), "{text}");
    }
}

fn reward(trade: &str, user: &str, amount: i64) -> SentReward {
    SentReward {
        trade_no: trade.into(),
        user_id: user.into(),
        activity_id: "act".into(),
        scene_id: "rain".into(),
        reward_type: "cash".into(),
        amount,
        sent_unix_ms: 1_700_000_000_000,
        stored: true,
    }
}

#[test]
fn a_sent_list_keeps_first_sends_and_counts_repeats_and_conflicts() {
    let path = std::env::temp_dir().join(format!("books-sent-{}.tsv", std::process::id()));
    let lines = [
        reward("t1", "u1", 5).line(false),
        reward("t2", "u2", 7).line(false),
        reward("t1", "u1", 5).line(true),
        // A repeat with another amount: a conflict, the first send kept.
        reward("t2", "u2", 8).line(true),
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let (sent, repeats, conflicts) = read_sent(&path).unwrap();
    assert_eq!(sent.len(), 2);
    assert_eq!((repeats, conflicts), (2, 1));
    assert_eq!(sent["t2"].amount, 7);
    assert_eq!(sent["t1"], reward("t1", "u1", 5));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_malformed_sent_line_is_refused_with_its_number() {
    let path = std::env::temp_dir().join(format!("books-bad-{}.tsv", std::process::id()));
    for bad in [
        "t1\tu1\tact\train\tcash\tfive\t1\t1\t0",
        "t1\tu1\tact",
        "t1\tu1\tact\train\tcash\t5\t1\t1\t0\textra",
    ] {
        let good = reward("t0", "u0", 1).line(false);
        std::fs::write(&path, format!("{good}\n{bad}\n")).unwrap();
        let e = read_sent(&path).unwrap_err().to_string();
        assert!(e.contains("line 2: malformed"), "{bad:?}: {e}");
    }
    let e = read_sent(&path.with_extension("none"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("cannot read"), "{e}");
    std::fs::remove_file(&path).unwrap();
}

proptest::proptest! {
    /// Any bytes as a sent list: an answer or a typed refusal, never a panic.
    #[test]
    fn any_bytes_as_a_sent_list_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
        let path = std::env::temp_dir().join(format!("books-any-{}-{}.tsv", std::process::id(), rand::random::<u32>()));
        std::fs::write(&path, &bytes).unwrap();
        let _ = read_sent(&path);
        std::fs::remove_file(&path).unwrap();
    }
}
