//! Event proofs: what lets the reward service tell an event a key holder issued from
//! a record anyone with write access to a topic could have put there.
//!
//! # Who holds what
//! The proof key is derived from the token key ring, so exactly the parties that can
//! seal tokens (activity services through the SDK, the reward service) can sign events,
//! and no new secret has to be handed out or rotated. A consumer holds no key: it asks
//! the service to verify (`GrantBatchRequest.require_proof`), and the service refuses
//! an event without a valid proof before it touches a claim or a budget.
//!
//! # Format (`docs/spec/event-proof.md`, with test vectors)
//! ```text
//! proof   = 0x01 | key id (u16, big endian) | tag[0..16]
//! key     = HKDF-SHA256(ikm = master key, salt = "reward-event-proof/v1", info = key id (u16 BE)), 32 bytes
//! tag     = HMAC-SHA256(key, 0x01 | fields)
//! fields  = str(trade_no) | str(user_id) | str(device_id) | str(app_id) | str(activity_id)
//!         | str(scene_id) | str(reward_type) | i64(amount) | i64(created_at_ms)
//!         | i64(expires_at_ms) | str(description) | u32(entries) | (str(key) | str(value))*
//! str(s)  = u32 BE byte length | bytes;  i64 = 8 bytes big endian (two's complement)
//! ```
//! Extension entries are taken in ascending byte order of their keys, so the tag does
//! not depend on a map's iteration order. `retry_count` and `not_before_ms` are left
//! out: a consumer changes them when it requeues an event, and neither moves money
//! (the limits bound `not_before_ms`). Everything else is covered, so a proof taken
//! from one event fails on another user, amount, type, activity, expiry or trade number.
//!
//! # What a proof does not do
//! It does not stop a replay of the same event: the trade number's claim record does
//! (a second delivery is `DUPLICATE`). It does not hide anything: events are not
//! encrypted. And it cannot outlive a key: an event signed under a key that was
//! dropped from the ring no longer verifies (`UnknownKey`), so keep a retired key as
//! long as events signed under it can still be on a topic or in the delay queue.
//!
//! ```
//! use proto::v1::{RewardEvent, UserInfo};
//! use sdk::token::{KeyRing, TokenCodec};
//! use sdk::token::proof::ProofError;
//!
//! let codec = TokenCodec::new(KeyRing::random(1));
//! let mut ev = RewardEvent {
//!     trade_no: "cny:rain:1:u42".into(),
//!     user: Some(UserInfo { user_id: "u42".into(), ..Default::default() }),
//!     amount: 888,
//!     ..Default::default()
//! };
//! codec.proofs().sign(&mut ev);
//! assert_eq!(codec.proofs().verify(&ev), Ok(1));
//! ev.amount = 999_999;
//! assert_eq!(codec.proofs().verify(&ev), Err(ProofError::Forged));
//! ev.proof.clear();
//! assert_eq!(codec.proofs().verify(&ev), Err(ProofError::Missing));
//! ```

use std::collections::BTreeMap;

use hkdf::Hkdf;
use hmac::{Hmac, KeyInit, Mac};
use proto::v1::RewardEvent;
use sha2::Sha256;
use zeroize::Zeroizing;

use super::keyring::{KeyId, KeyRing};

/// The proof layout this build writes and reads.
pub const PROOF_VERSION: u8 = 1;
/// Bytes of the HMAC kept in a proof.
pub const TAG_LEN: usize = 16;
/// Bytes of a whole proof.
pub const PROOF_LEN: usize = proto::limits::PROOF_LEN;
const SALT: &[u8] = b"reward-event-proof/v1";

/// Why an event does not prove itself. The `as_code` form is the service's
/// `error_code` and the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The event carries no proof (written by something that does not sign: an old
    /// SDK, or anyone but a key holder).
    #[error("the event carries no proof")]
    Missing,
    /// The proof is not a version-1 proof of the right length.
    #[error("the event's proof is malformed")]
    Malformed,
    /// The proof names a key this ring does not hold (retired, or made up).
    #[error("the event's proof names key id {0}, which this ring does not hold")]
    UnknownKey(KeyId),
    /// The tag does not verify: the proof was made for other fields, or forged.
    #[error("the event's proof does not verify (its fields were changed, or it is forged)")]
    Forged,
}

impl ProofError {
    /// The stable error code a service answers with (`PROOF_*`).
    pub const fn as_code(self) -> &'static str {
        match self {
            ProofError::Missing => "PROOF_MISSING",
            ProofError::Malformed | ProofError::Forged => "PROOF_FORGED",
            ProofError::UnknownKey(_) => "PROOF_UNKNOWN_KEY",
        }
    }
}

/// Signs and verifies event proofs under the keys of a [`KeyRing`] (one derived MAC
/// key per ring key, made once). Cheap to share.
pub struct EventProofs {
    current: KeyId,
    /// A MAC already keyed for each ring key: cloning it is cheaper than keying anew.
    macs: BTreeMap<KeyId, Hmac<Sha256>>,
}

impl std::fmt::Debug for EventProofs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventProofs")
            .field("current", &self.current)
            .field("key_ids", &self.macs.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The derived proof key of `master` under `id`.
fn derive(master: &[u8; 32], id: KeyId) -> Zeroizing<[u8; 32]> {
    let mut k = Zeroizing::new([0u8; 32]);
    // 32 bytes is far below HKDF-SHA256's output limit: cannot fail.
    let _ = Hkdf::<Sha256>::new(Some(SALT), master).expand(&id.to_be_bytes(), k.as_mut_slice());
    k
}

fn put_str(mac: &mut Hmac<Sha256>, s: &str) {
    // Lengths are bounded by the limits (and by protobuf's 2 GiB) well inside u32.
    let n = u32::try_from(s.len()).unwrap_or(u32::MAX);
    mac.update(&n.to_be_bytes());
    mac.update(s.as_bytes());
}

/// Feeds the covered fields of `ev` into `mac`, in the spec's order.
fn feed(mac: &mut Hmac<Sha256>, ev: &RewardEvent) {
    mac.update(&[PROOF_VERSION]);
    put_str(mac, &ev.trade_no);
    let user = ev.user.as_ref();
    put_str(mac, user.map_or("", |u| u.user_id.as_str()));
    put_str(mac, user.map_or("", |u| u.device_id.as_str()));
    put_str(mac, user.map_or("", |u| u.app_id.as_str()));
    put_str(mac, &ev.activity_id);
    put_str(mac, &ev.scene_id);
    put_str(mac, &ev.reward_type);
    mac.update(&ev.amount.to_be_bytes());
    mac.update(&ev.created_at_ms.to_be_bytes());
    mac.update(&ev.expires_at_ms.to_be_bytes());
    put_str(mac, &ev.description);
    let n = u32::try_from(ev.extension.len()).unwrap_or(u32::MAX);
    mac.update(&n.to_be_bytes());
    if !ev.extension.is_empty() {
        let mut entries: Vec<(&String, &String)> = ev.extension.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        for (k, v) in entries {
            put_str(mac, k);
            put_str(mac, v);
        }
    }
}

impl EventProofs {
    /// Proofs under every key of `ring`; the ring's current key signs.
    pub fn new(ring: &KeyRing) -> Self {
        let macs = ring
            .ids()
            .filter_map(|id| {
                let key = derive(ring.key(id)?, id);
                let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_slice()).ok()?;
                Some((id, mac))
            })
            .collect();
        Self {
            current: ring.current_id(),
            macs,
        }
    }

    /// The proof of `ev` under the current key (its own `proof` field is ignored).
    pub fn proof(&self, ev: &RewardEvent) -> Vec<u8> {
        let mut out = Vec::with_capacity(PROOF_LEN);
        out.push(PROOF_VERSION);
        out.extend_from_slice(&self.current.to_be_bytes());
        // The ring guarantees its current key is held, so the MAC is always there.
        if let Some(mac) = self.macs.get(&self.current) {
            let mut mac = mac.clone();
            feed(&mut mac, ev);
            out.extend_from_slice(&mac.finalize().into_bytes()[..TAG_LEN]);
        }
        out
    }

    /// Sets `ev.proof` to its proof under the current key.
    pub fn sign(&self, ev: &mut RewardEvent) {
        ev.proof = self.proof(ev);
    }

    /// Checks `ev.proof` against its fields; the key id it was made under when valid.
    /// The tag is compared in constant time.
    pub fn verify(&self, ev: &RewardEvent) -> Result<KeyId, ProofError> {
        let p = ev.proof.as_slice();
        if p.is_empty() {
            return Err(ProofError::Missing);
        }
        if p.len() != PROOF_LEN || p[0] != PROOF_VERSION {
            return Err(ProofError::Malformed);
        }
        let id = KeyId::from_be_bytes([p[1], p[2]]);
        let mut mac = self
            .macs
            .get(&id)
            .ok_or(ProofError::UnknownKey(id))?
            .clone();
        feed(&mut mac, ev);
        mac.verify_truncated_left(&p[3..])
            .map_err(|_| ProofError::Forged)?;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use proptest::prelude::*;
    use proto::v1::UserInfo;

    use super::*;

    fn event() -> RewardEvent {
        RewardEvent {
            trade_no: "cny:rain:1:u42".into(),
            user: Some(UserInfo {
                user_id: "u42".into(),
                device_id: "d1".into(),
                app_id: "app".into(),
            }),
            activity_id: "cny".into(),
            scene_id: "rain".into(),
            reward_type: "cash".into(),
            amount: 888,
            extension: [("b", "2"), ("a", "1")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            retry_count: 0,
            created_at_ms: 1_800_000_000_000,
            description: "lucky".into(),
            not_before_ms: 0,
            expires_at_ms: 1_800_000_600_000,
            proof: Vec::new(),
        }
    }

    type Edit = Box<dyn Fn(&mut RewardEvent)>;

    /// Every covered field, changed one at a time.
    fn edits() -> Vec<(&'static str, Edit)> {
        vec![
            ("trade_no", Box::new(|e| e.trade_no.push('x'))),
            (
                "user_id",
                Box::new(|e| e.user.as_mut().unwrap().user_id = "u43".into()),
            ),
            (
                "device_id",
                Box::new(|e| e.user.as_mut().unwrap().device_id.clear()),
            ),
            (
                "app_id",
                Box::new(|e| e.user.as_mut().unwrap().app_id.push('x')),
            ),
            ("no user", Box::new(|e| e.user = None)),
            ("activity_id", Box::new(|e| e.activity_id = "other".into())),
            ("scene_id", Box::new(|e| e.scene_id.push('x'))),
            ("reward_type", Box::new(|e| e.reward_type = "coin".into())),
            ("amount", Box::new(|e| e.amount += 1)),
            ("created_at_ms", Box::new(|e| e.created_at_ms -= 1)),
            ("expires_at_ms", Box::new(|e| e.expires_at_ms = 0)),
            ("description", Box::new(|e| e.description.clear())),
            (
                "extension value",
                Box::new(|e| {
                    e.extension.insert("a".into(), "9".into());
                }),
            ),
            (
                "extension entry",
                Box::new(|e| {
                    e.extension.insert("c".into(), String::new());
                }),
            ),
            // Moving bytes between neighbouring fields changes the length prefixes.
            (
                "shifted bytes",
                Box::new(|e| {
                    e.activity_id = "cnyr".into();
                    e.scene_id = "ain".into();
                }),
            ),
        ]
    }

    #[test]
    fn a_proof_verifies_and_breaks_on_every_covered_field() {
        let p = EventProofs::new(&KeyRing::random(2));
        let mut ev = event();
        p.sign(&mut ev);
        assert_eq!(ev.proof.len(), PROOF_LEN);
        assert_eq!(p.verify(&ev), Ok(2));
        for (what, edit) in edits() {
            let mut e = ev.clone();
            edit(&mut e);
            assert_eq!(p.verify(&e), Err(ProofError::Forged), "{what}");
        }
        // The pipeline's own changes keep it valid.
        let mut e = ev.clone();
        e.retry_count = 7;
        e.not_before_ms = 1_800_000_001_000;
        assert_eq!(p.verify(&e), Ok(2));
        // A map built in another order proves the same.
        let mut e = ev.clone();
        e.extension = [("a", "1"), ("b", "2")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(p.verify(&e), Ok(2));
    }

    #[test]
    fn proofs_under_other_or_retired_keys_are_refused() {
        let ring = KeyRing::random(3);
        let old = EventProofs::new(&ring.clone().with_current(1).unwrap());
        let new = EventProofs::new(&ring);
        let mut ev = event();
        old.sign(&mut ev);
        assert_eq!(
            new.verify(&ev),
            Ok(1),
            "older keys of the ring still verify"
        );
        let stranger = EventProofs::new(&KeyRing::random(3));
        assert_eq!(stranger.verify(&ev), Err(ProofError::Forged));
        let mut e = ev.clone();
        e.proof[1..3].copy_from_slice(&9u16.to_be_bytes());
        assert_eq!(new.verify(&e), Err(ProofError::UnknownKey(9)));
        let mut e = ev.clone();
        e.proof[0] = 2;
        assert_eq!(new.verify(&e), Err(ProofError::Malformed));
        e.proof = vec![PROOF_VERSION; PROOF_LEN - 1];
        assert_eq!(new.verify(&e), Err(ProofError::Malformed));
        e.proof.clear();
        assert_eq!(new.verify(&e), Err(ProofError::Missing));
        assert_eq!(ProofError::Missing.as_code(), "PROOF_MISSING");
        assert_eq!(ProofError::UnknownKey(9).as_code(), "PROOF_UNKNOWN_KEY");
        assert_eq!(ProofError::Forged.as_code(), "PROOF_FORGED");
    }

    #[test]
    fn debug_shows_key_ids_only() {
        let p = EventProofs::new(&KeyRing::random(2));
        let shown = format!("{p:?}");
        assert_eq!(shown, "EventProofs { current: 2, key_ids: [1, 2] }");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: proto::edits::cases().min(5_000), failure_persistence: None, ..ProptestConfig::default() })]

        /// Arbitrary proof bytes never verify (the tag is 128 bits).
        #[test]
        fn arbitrary_proofs_never_verify(proof in proptest::collection::vec(any::<u8>(), 0..40), id in 1u16..3) {
            let p = EventProofs::new(&KeyRing::random(2));
            let mut ev = event();
            ev.proof = proof;
            if ev.proof.len() >= 3 {
                ev.proof[1..3].copy_from_slice(&id.to_be_bytes());
            }
            prop_assert!(p.verify(&ev).is_err());
        }

        /// Any edit of a valid proof's bytes is refused.
        #[test]
        fn edited_proofs_are_refused(
            edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..6),
        ) {
            let p = EventProofs::new(&KeyRing::random(1));
            let mut ev = event();
            p.sign(&mut ev);
            let good = ev.proof.clone();
            proto::edits::apply(&mut ev.proof, &edits);
            prop_assume!(ev.proof != good);
            prop_assert!(p.verify(&ev).is_err());
        }

        /// A proof made for one event fails on any other event with different
        /// covered fields (amount, user, trade number drawn at random).
        #[test]
        fn a_proof_moved_to_another_event_fails(
            amount in 1i64..1_000_000, user in "[a-z0-9]{1,12}", trade in "[a-z0-9:]{1,20}",
        ) {
            let p = EventProofs::new(&KeyRing::random(1));
            let mut ev = event();
            p.sign(&mut ev);
            let mut other = event();
            other.amount = amount;
            other.user.as_mut().unwrap().user_id = user;
            other.trade_no = trade;
            other.proof = ev.proof.clone();
            let same = other.amount == ev.amount
                && other.user == ev.user
                && other.trade_no == ev.trade_no;
            prop_assert_eq!(p.verify(&other).is_ok(), same);
        }
    }
}
