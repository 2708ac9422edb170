//! Wallet sessions: a short-lived, signed pass for one user in one activity.
//!
//! A wallet backend (the host application that knows who is logged in) mints a
//! session and hands it to the user's browser; the browser presents it to the reward
//! service's wallet routes as `Authorization: Bearer <session>`, and the service acts
//! for that user and activity only. The service-wide wallet credential stays for
//! backends; a session is what a browser may hold: it names one user, one activity and
//! an expiry, and is worth nothing after it.
//!
//! # Format (version 1)
//!
//! ```text
//! "rws1." base64url-nopad( body | tag [32] )
//! body = 0x01 | key id u16 | expires_at_ms u64 | user len u16 | user | activity len u16 | activity
//! tag  = HMAC-SHA256( K(key id), "reward-session/v1" | body )      (integers big-endian)
//! ```
//!
//! `K` is derived from the ring's master key by HKDF-SHA256 with the label
//! `reward-session/v1 mac`, so a ring file used by mistake for both tokens and
//! sessions still gives the two uses unrelated keys. The tag is checked (in constant
//! time) before any field after the key id is believed. Ids follow the pipeline's id
//! rule ([`proto::ids`]).
//!
//! # Keys and rotation
//! The same text form and rotation as the token keys ([`crate::token::KeyRing`]), in
//! their own variables: `REWARD_SESSION_KEYS` or a file named by
//! `REWARD_SESSION_KEYS_FILE`, `REWARD_SESSION_CURRENT_KEY` to pick the minting key.
//! To rotate: add a key with a higher id everywhere with `REWARD_SESSION_CURRENT_KEY`
//! pinned to the old id (the highest id would otherwise mint at once, before every
//! verifier holds it), then unpin; drop the old key once the longest session minted
//! with it has expired ([`MAX_TTL`] at most).
//!
//! # What a session does not do
//! It cannot be revoked before its expiry (keep lifetimes short: minutes); it does not
//! name a device. A stolen session acts for its one user in its one activity until it
//! expires, which the wallet routes limit to reading the page and crediting that
//! user's own legal tokens.
//!
//! ```
//! use std::time::Duration;
//! use sdk::session::{SessionCodec, SessionError};
//! use sdk::token::KeyRing;
//!
//! let codec = SessionCodec::new(KeyRing::random(1));
//! let now_ms = 1_800_000_000_000;
//! let pass = codec.mint("u42", "cny", Duration::from_secs(900), now_ms).unwrap();
//! let s = codec.verify(&pass, now_ms + 1_000).unwrap();
//! assert_eq!((s.user_id.as_str(), s.activity_id.as_str()), ("u42", "cny"));
//! // Fifteen minutes later it is worth nothing.
//! assert!(matches!(codec.verify(&pass, now_ms + 900_000), Err(SessionError::Expired { .. })));
//! ```

use std::time::Duration;

use base64::Engine;
use hmac::{KeyInit, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

use crate::token::{KeyId, KeyRing, KeyRingError};

/// Env var holding the session key ring's text form.
pub const KEYS_ENV: &str = "REWARD_SESSION_KEYS";
/// Env var naming a file holding it (used when [`KEYS_ENV`] is unset).
pub const KEYS_FILE_ENV: &str = "REWARD_SESSION_KEYS_FILE";
/// Env var choosing the minting key id (default: the highest id).
pub const CURRENT_KEY_ENV: &str = "REWARD_SESSION_CURRENT_KEY";

/// What every session starts with.
pub const PREFIX: &str = "rws1.";
/// The longest lifetime a session may have.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// The longest text a verifier reads (longer is refused before decoding).
pub const MAX_LEN: usize = 1024;

const VERSION: u8 = 1;
const TAG_LEN: usize = 32;
const LABEL: &[u8] = b"reward-session/v1";
// version, key id, expiry, two lengths
const FIXED: usize = 1 + 2 + 8 + 2 + 2;

/// Why a session was refused (or could not be minted). Never holds a key or the
/// session's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The text does not start with [`PREFIX`]: not a session at all.
    #[error("not a session")]
    NotASession,
    /// It starts like one but does not read as one.
    #[error("malformed session: {0}")]
    Malformed(&'static str),
    /// Signed with a key this ring does not hold (rotated out, or never ours).
    #[error("session signed with unknown key id {0}")]
    UnknownKey(KeyId),
    /// The signature does not match: edited, or made without the key.
    #[error("session signature does not match")]
    Forged,
    /// Past its expiry.
    #[error("session expired at {at_ms} (Unix ms)")]
    Expired {
        /// When it expired.
        at_ms: u64,
    },
    /// Its expiry lies further ahead than any session may live.
    #[error("session lives longer than {} s", MAX_TTL.as_secs())]
    TooLong,
    /// A minting request that cannot be honoured (bad id, lifetime out of range).
    #[error("cannot mint a session: {0}")]
    Mint(String),
}

/// A verified session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The user it acts for.
    pub user_id: String,
    /// The activity it is good for.
    pub activity_id: String,
    /// When it stops being accepted (Unix ms).
    pub expires_at_ms: u64,
    /// The key that signed it.
    pub key_id: KeyId,
}

/// Mints and verifies sessions with a key ring.
#[derive(Clone)]
pub struct SessionCodec {
    ring: KeyRing,
    /// The MAC key of each ring key, derived once (wiped on drop).
    macs: std::collections::BTreeMap<KeyId, Zeroizing<[u8; 32]>>,
}

impl std::fmt::Debug for SessionCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCodec")
            .field("ring", &self.ring)
            .finish()
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

impl SessionCodec {
    /// A codec over `ring`: the current key mints, every key verifies.
    pub fn new(ring: KeyRing) -> Self {
        let macs = ring
            .ids()
            .filter_map(|id| {
                let master = ring.key(id)?;
                let mut k = Zeroizing::new([0u8; 32]);
                hkdf::Hkdf::<Sha256>::new(None, master)
                    .expand(b"reward-session/v1 mac", k.as_mut_slice())
                    .ok()?;
                Some((id, k))
            })
            .collect();
        Self { ring, macs }
    }

    /// The ring from `REWARD_SESSION_KEYS`, else the file `REWARD_SESSION_KEYS_FILE`;
    /// `REWARD_SESSION_CURRENT_KEY` picks the minting key.
    pub fn from_env() -> Result<Self, KeyRingError> {
        KeyRing::from_vars(KEYS_ENV, KEYS_FILE_ENV, CURRENT_KEY_ENV).map(Self::new)
    }

    /// The ring's key ids (for logs: ids only).
    pub fn ring(&self) -> &KeyRing {
        &self.ring
    }

    fn mac(&self, id: KeyId) -> Option<hmac::Hmac<Sha256>> {
        let k = self.macs.get(&id)?;
        let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(k.as_slice()).ok()?;
        mac.update(LABEL);
        Some(mac)
    }

    /// A session for `user_id` in `activity_id` that expires `ttl` after `now_ms`.
    /// `ttl` must be 1 s ..= [`MAX_TTL`]; the ids follow [`proto::ids::check_id`].
    pub fn mint(
        &self,
        user_id: &str,
        activity_id: &str,
        ttl: Duration,
        now_ms: u64,
    ) -> Result<String, SessionError> {
        for (name, v) in [("user_id", user_id), ("activity_id", activity_id)] {
            proto::ids::check_id(v, proto::ids::MAX_ID_LEN)
                .map_err(|p| SessionError::Mint(format!("{name} {p}")))?;
        }
        if ttl < Duration::from_secs(1) || ttl > MAX_TTL {
            return Err(SessionError::Mint(format!(
                "lifetime must be 1 s ..= {} s",
                MAX_TTL.as_secs()
            )));
        }
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let id = self.ring.current_id();
        let mut body = Vec::with_capacity(FIXED + user_id.len() + activity_id.len() + TAG_LEN);
        body.push(VERSION);
        body.extend_from_slice(&id.to_be_bytes());
        body.extend_from_slice(&now_ms.saturating_add(ttl_ms).to_be_bytes());
        for v in [user_id, activity_id] {
            // check_id bounds both to MAX_ID_LEN (64), well inside u16.
            let len =
                u16::try_from(v.len()).map_err(|_| SessionError::Mint("id too long".into()))?;
            body.extend_from_slice(&len.to_be_bytes());
            body.extend_from_slice(v.as_bytes());
        }
        let mut mac = self
            .mac(id)
            .ok_or(SessionError::Mint("the current key is not usable".into()))?;
        mac.update(&body);
        body.extend_from_slice(&mac.finalize().into_bytes());
        Ok(format!("{PREFIX}{}", b64().encode(&body)))
    }

    /// Checks a presented session at `now_ms`: prefix, layout, key, signature (in
    /// constant time, before the fields are read), ids, expiry.
    pub fn verify(&self, text: &str, now_ms: u64) -> Result<Session, SessionError> {
        let rest = text.strip_prefix(PREFIX).ok_or(SessionError::NotASession)?;
        if text.len() > MAX_LEN {
            return Err(SessionError::Malformed("too long"));
        }
        let bytes = b64()
            .decode(rest)
            .map_err(|_| SessionError::Malformed("not base64url"))?;
        if bytes.len() < FIXED + 2 + TAG_LEN {
            return Err(SessionError::Malformed("too short"));
        }
        let (body, tag) = bytes.split_at(bytes.len() - TAG_LEN);
        if body[0] != VERSION {
            return Err(SessionError::Malformed("unknown version"));
        }
        let id = KeyId::from_be_bytes([body[1], body[2]]);
        let mut mac = self.mac(id).ok_or(SessionError::UnknownKey(id))?;
        mac.update(body);
        mac.verify_slice(tag).map_err(|_| SessionError::Forged)?;
        // Signed by us: the layout can still be wrong only if a minter was buggy.
        let mut at = 3;
        let mut take = |n: usize| -> Result<&[u8], SessionError> {
            let s = body
                .get(at..at + n)
                .ok_or(SessionError::Malformed("truncated"))?;
            at += n;
            Ok(s)
        };
        let expires_at_ms = u64::from_be_bytes(
            take(8)?
                .try_into()
                .map_err(|_| SessionError::Malformed("truncated"))?,
        );
        let mut ids = Vec::with_capacity(2);
        for _ in 0..2 {
            let len = take(2)?;
            let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
            let v = std::str::from_utf8(take(len)?)
                .map_err(|_| SessionError::Malformed("id is not UTF-8"))?;
            proto::ids::check_id(v, proto::ids::MAX_ID_LEN)
                .map_err(|_| SessionError::Malformed("id breaks the id rule"))?;
            ids.push(v.to_string());
        }
        if at != body.len() {
            return Err(SessionError::Malformed("trailing bytes"));
        }
        if now_ms >= expires_at_ms {
            return Err(SessionError::Expired {
                at_ms: expires_at_ms,
            });
        }
        let max_ms = u64::try_from(MAX_TTL.as_millis()).unwrap_or(u64::MAX);
        if expires_at_ms - now_ms > max_ms {
            return Err(SessionError::TooLong);
        }
        let activity_id = ids.pop().unwrap_or_default();
        let user_id = ids.pop().unwrap_or_default();
        Ok(Session {
            user_id,
            activity_id,
            expires_at_ms,
            key_id: id,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    const NOW: u64 = 1_800_000_000_000;

    fn codec() -> SessionCodec {
        SessionCodec::new(KeyRing::random(2))
    }

    #[test]
    fn a_session_verifies_for_its_user_until_it_expires() {
        let c = codec();
        let s = c.mint("u1", "cny", Duration::from_secs(60), NOW).unwrap();
        assert!(s.starts_with(PREFIX));
        let v = c.verify(&s, NOW).unwrap();
        assert_eq!(v.user_id, "u1");
        assert_eq!(v.activity_id, "cny");
        assert_eq!(v.expires_at_ms, NOW + 60_000);
        assert_eq!(v.key_id, 2);
        assert!(c.verify(&s, NOW + 59_999).is_ok());
        assert_eq!(
            c.verify(&s, NOW + 60_000),
            Err(SessionError::Expired {
                at_ms: NOW + 60_000
            })
        );
    }

    #[test]
    fn rotation_old_sessions_verify_while_their_key_is_held() {
        let ring = KeyRing::random(2);
        let old = SessionCodec::new(ring.clone().with_current(1).unwrap());
        let s = old.mint("u1", "cny", Duration::from_secs(60), NOW).unwrap();
        // The new minter (current key 2) still verifies a key-1 session.
        assert_eq!(SessionCodec::new(ring).verify(&s, NOW).unwrap().key_id, 1);
        // A verifier that dropped key 1 refuses it by id.
        let text = KeyRing::random(1).to_text();
        let other = SessionCodec::new(KeyRing::parse(&text, None).unwrap());
        assert_eq!(other.verify(&s, NOW), Err(SessionError::Forged));
        let only_three =
            SessionCodec::new(KeyRing::parse(&text.replace("1:", "3:"), None).unwrap());
        assert_eq!(only_three.verify(&s, NOW), Err(SessionError::UnknownKey(1)));
    }

    #[test]
    fn bad_input_is_refused_by_kind() {
        let c = codec();
        assert_eq!(c.verify("", NOW), Err(SessionError::NotASession));
        assert_eq!(c.verify("Bearer x", NOW), Err(SessionError::NotASession));
        assert_eq!(
            c.verify("rws1.!!", NOW),
            Err(SessionError::Malformed("not base64url"))
        );
        assert_eq!(
            c.verify("rws1.AAAA", NOW),
            Err(SessionError::Malformed("too short"))
        );
        let long = format!("{PREFIX}{}", "A".repeat(MAX_LEN));
        assert_eq!(
            c.verify(&long, NOW),
            Err(SessionError::Malformed("too long"))
        );
        for (u, a, ttl) in [
            ("", "cny", 60),
            ("u 1", "cny", 60),
            ("u1", "", 60),
            ("u1", "cny", 0),
            ("u1", "cny", 24 * 3600 + 1),
        ] {
            assert!(matches!(
                c.mint(u, a, Duration::from_secs(ttl), NOW),
                Err(SessionError::Mint(_))
            ));
        }
        // A session minted "now" by a clock far ahead lives too long for this one.
        let ahead = c
            .mint("u1", "cny", Duration::from_secs(60), NOW + 25 * 3_600_000)
            .unwrap();
        assert_eq!(c.verify(&ahead, NOW), Err(SessionError::TooLong));
    }

    #[test]
    fn every_edited_byte_is_refused() {
        let c = codec();
        let s = c.mint("u1", "cny", Duration::from_secs(60), NOW).unwrap();
        let raw = b64().decode(&s[PREFIX.len()..]).unwrap();
        for i in 0..raw.len() {
            let mut b = raw.clone();
            b[i] ^= 0x01;
            let edited = format!("{PREFIX}{}", b64().encode(&b));
            let got = c.verify(&edited, NOW);
            assert!(
                matches!(
                    got,
                    Err(SessionError::Forged
                        | SessionError::UnknownKey(_)
                        | SessionError::Malformed(_))
                ),
                "byte {i}: {got:?}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: proto::edits::cases(), failure_persistence: None, ..ProptestConfig::default() })]

        /// Any text after the prefix: refused by kind, never a panic, never accepted.
        #[test]
        fn arbitrary_bytes_never_verify(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
            let c = codec();
            let text = format!("{PREFIX}{}", b64().encode(&bytes));
            prop_assert!(c.verify(&text, NOW).is_err());
            let lossy = String::from_utf8_lossy(&bytes);
            prop_assert!(c.verify(&lossy, NOW).is_err());
        }

        /// Any user and activity the id rule allows round-trips.
        #[test]
        fn minted_sessions_round_trip(user in "[A-Za-z0-9_.-]{1,64}", activity in "[A-Za-z0-9_.-]{1,64}") {
            let c = codec();
            let s = c.mint(&user, &activity, Duration::from_secs(5), NOW).unwrap();
            prop_assert!(s.len() <= MAX_LEN);
            let v = c.verify(&s, NOW).unwrap();
            prop_assert_eq!((v.user_id, v.activity_id), (user, activity));
        }
    }
}
