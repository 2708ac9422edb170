//! The event proof's test vectors (`docs/spec/vectors/event-proof.json`), computed by
//! an independent implementation of `docs/spec/event-proof.md`: this build signs each
//! event to the same bytes and verifies it, and refuses it once any covered field
//! changes. A client in another language checks itself against the same file.

// Helpers may unwrap: a failure here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proto::v1::{RewardEvent, UserInfo};
use sdk::token::KeyRing;
use sdk::token::proof::{EventProofs, ProofError};
use serde_json::Value;

const VECTORS: &str = include_str!("../../docs/spec/vectors/event-proof.json");

fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or_default()
}

fn event(v: &Value) -> RewardEvent {
    let user = &v["user"];
    RewardEvent {
        trade_no: text(v, "trade_no").into(),
        user: Some(UserInfo {
            user_id: text(user, "user_id").into(),
            device_id: text(user, "device_id").into(),
            app_id: text(user, "app_id").into(),
        }),
        activity_id: text(v, "activity_id").into(),
        scene_id: text(v, "scene_id").into(),
        reward_type: text(v, "reward_type").into(),
        amount: v["amount"].as_i64().unwrap(),
        created_at_ms: v["created_at_ms"].as_i64().unwrap(),
        expires_at_ms: v["expires_at_ms"].as_i64().unwrap(),
        description: text(v, "description").into(),
        extension: v["extension"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, x)| (k.clone(), x.as_str().unwrap().to_string()))
            .collect(),
        // Not covered by the proof: any value verifies.
        retry_count: 5,
        not_before_ms: 1_800_000_009_000,
        proof: Vec::new(),
    }
}

#[test]
fn every_vector_signs_to_its_bytes_and_verifies() {
    let doc: Value = serde_json::from_str(VECTORS).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 3);
    for case in cases {
        let name = text(case, "name");
        let kid = u16::try_from(case["key_id"].as_u64().unwrap()).unwrap();
        let ring = KeyRing::parse(text(&doc, "key_ring"), Some(kid)).unwrap();
        let proofs = EventProofs::new(&ring);
        let mut ev = event(&case["event"]);
        proofs.sign(&mut ev);
        assert_eq!(hex::encode(&ev.proof), text(case, "proof_hex"), "{name}");
        assert_eq!(proofs.verify(&ev), Ok(kid), "{name}");
        // Verified by a ring whose current key is another one: any held key verifies.
        let other = EventProofs::new(&KeyRing::parse(text(&doc, "key_ring"), None).unwrap());
        assert_eq!(other.verify(&ev), Ok(kid), "{name}");
        let mut changed = ev.clone();
        changed.amount += 1;
        assert_eq!(proofs.verify(&changed), Err(ProofError::Forged), "{name}");
    }
}
