//! Arbitrary and edited bytes into the wallet's body and query parsers.
#![allow(clippy::unwrap_used)]

use super::handlers::{ActivityQuery, KeptBody, MintBody, TokensBody};
use proptest::prelude::*;

fn parse_all(bytes: &[u8]) {
    let _ = serde_json::from_slice::<TokensBody>(bytes);
    let _ = serde_json::from_slice::<KeptBody>(bytes);
    let _ = serde_json::from_slice::<MintBody>(bytes);
    if let Ok(text) = std::str::from_utf8(bytes) {
        let _ = serde_urlencoded_like(text);
    }
}

/// The query string as axum's `Query` reads it (form-urlencoded pairs).
fn serde_urlencoded_like(text: &str) -> Option<String> {
    let q: Result<axum::extract::Query<ActivityQuery>, _> =
        axum::extract::Query::try_from_uri(&format!("/x?{text}").parse().ok()?);
    q.ok().map(|q| q.0.activity_id)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proto::edits::cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// Any body bytes: parsed or refused, never a panic.
    #[test]
    fn wallet_bodies_take_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        parse_all(&bytes);
    }

    /// Edits of a valid body (the parser's deeper paths): parsed or refused.
    #[test]
    fn wallet_bodies_take_edited_json(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..8),
    ) {
        let mut b = br#"{"user_id":"u1","activity_id":"cny","tokens":["AAAA","BBBB"]}"#.to_vec();
        proto::edits::apply(&mut b, &edits);
        parse_all(&b);
    }
}
