//! The reward token's test vectors (`docs/spec/vectors/reward-token.json`), sealed by
//! an independent implementation of `docs/spec/reward-token.md`
//! (`conformance/token_spec.py`): this build opens each to the same token, or refuses
//! it for the reason the vector names, and writes the same plaintext bytes. A wallet
//! backend in another language checks itself against the same file.

// Helpers may unwrap: a failure here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine;
use prost::Message;
use proto::v1::RewardToken;
use sdk::token::{Illegal, KeyRing, TokenCodec};
use serde_json::Value;

const VECTORS: &str = include_str!("../../docs/spec/vectors/reward-token.json");

fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or_default()
}

fn int(v: &Value, k: &str) -> i64 {
    v.get(k).and_then(Value::as_i64).unwrap_or_default()
}

fn token(v: &Value) -> RewardToken {
    RewardToken {
        trade_no: text(v, "trade_no").into(),
        user_id: text(v, "user_id").into(),
        activity_id: text(v, "activity_id").into(),
        scene_id: text(v, "scene_id").into(),
        reward_type: text(v, "reward_type").into(),
        amount: int(v, "amount"),
        grant_time_ms: int(v, "grant_time_ms"),
        description: text(v, "description").into(),
        expires_at_ms: int(v, "expires_at_ms"),
        app_id: text(v, "app_id").into(),
    }
}

fn kind(e: &Illegal) -> &'static str {
    match e {
        Illegal::BadBase64 => "bad_base64",
        Illegal::Truncated => "truncated",
        Illegal::BadVersion(_) => "bad_version",
        Illegal::UnknownKey(_) => "unknown_key",
        Illegal::Forged => "forged",
        Illegal::BadProtobuf => "bad_protobuf",
        Illegal::BindingMismatch => "binding_mismatch",
    }
}

fn ring(doc: &Value) -> KeyRing {
    let b64 = base64::engine::general_purpose::STANDARD;
    let text: String = doc["ring"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let key = hex::decode(text(k, "key_hex")).unwrap();
            format!("{}:{}\n", k["id"].as_u64().unwrap(), b64.encode(key))
        })
        .collect();
    KeyRing::parse(&text, None).unwrap()
}

#[test]
fn every_vector_opens_or_is_refused_as_the_spec_says() {
    let doc: Value = serde_json::from_str(VECTORS).unwrap();
    let codec = TokenCodec::new(ring(&doc));
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 16, "{} cases", cases.len());
    let mut kinds = std::collections::BTreeSet::new();
    for c in cases {
        let name = text(c, "name");
        let open_as = &c["open_as"];
        let got = codec.open(
            text(c, "sealed"),
            text(open_as, "user_id"),
            text(open_as, "activity_id"),
        );
        let expect = text(c, "expect");
        kinds.insert(expect.to_string());
        match got {
            Ok(t) => {
                assert_eq!(expect, "ok", "{name}: opened");
                assert_eq!(t, token(&c["token"]), "{name}");
            }
            Err(e) => assert_eq!(kind(&e), expect, "{name}: {e}"),
        }
    }
    // Every refusal the spec names has a vector.
    for k in [
        "ok",
        "forged",
        "unknown_key",
        "bad_version",
        "truncated",
        "bad_base64",
        "bad_protobuf",
        "binding_mismatch",
    ] {
        assert!(kinds.contains(k), "no vector expects {k}");
    }
}

#[test]
fn the_plaintext_is_the_canonical_encoding_this_build_writes() {
    let doc: Value = serde_json::from_str(VECTORS).unwrap();
    for c in doc["cases"].as_array().unwrap() {
        let t = token(&c["token"]);
        let plain = hex::decode(text(c, "plaintext_hex")).unwrap();
        if text(c, "expect") == "bad_protobuf" {
            assert!(RewardToken::decode(plain.as_slice()).is_err());
            continue;
        }
        assert_eq!(t.encode_to_vec(), plain, "{}", text(c, "name"));
        // And the header the vector states is what the sealed text carries.
        if text(c, "expect") == "ok" {
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(text(c, "sealed"))
                .unwrap();
            assert_eq!(raw[0] as i64, int(c, "version"));
            assert_eq!(
                u16::from_be_bytes([raw[1], raw[2]]) as i64,
                int(c, "key_id")
            );
            assert_eq!(
                u32::from_be_bytes([raw[3], raw[4], raw[5], raw[6]]) as i64,
                int(c, "seal_ms") / 60_000
            );
            assert_eq!(hex::encode(&raw[7..19]), text(c, "nonce_hex"));
        }
    }
}

/// A token this build seals at a vector's instant, under the vector's ring, opens with
/// the same rules (the other direction is the conformance suite's: a Python opener
/// reads tokens a live SDK sealed).
#[test]
fn this_build_seals_what_the_vectors_open() {
    let doc: Value = serde_json::from_str(VECTORS).unwrap();
    let codec = TokenCodec::new(ring(&doc).with_current(1).unwrap());
    let c = &doc["cases"][0];
    let t = token(&c["token"]);
    let sealed = codec.seal_at(&t, int(c, "seal_ms")).unwrap();
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(&sealed)
        .unwrap();
    let mut header = vec![2u8, 0, 1];
    header.extend_from_slice(&((int(c, "seal_ms") / 60_000) as u32).to_be_bytes());
    assert_eq!(
        raw[..7],
        header[..],
        "version 2, key 1, the vector's period"
    );
    assert_eq!(codec.open(&sealed, &t.user_id, &t.activity_id).unwrap(), t);
}
