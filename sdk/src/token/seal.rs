//! Sealing and opening reward tokens.
//!
//! # Format (version 2; version 1 still opens)
//!
//! ```text
//! base64url-nopad( 0x02 | key id u16 | period u32 | nonce [12] | AES-256-GCM(token) | tag [16] )
//!                  '-------------- header, 19 bytes ---------'
//! ```
//!
//! - **key id**: which master key of the [`KeyRing`] sealed it, so keys can rotate while
//!   tokens sealed under older keys still open.
//! - **period**: the minute (Unix time / 60 s) the token was sealed in. The cipher key is
//!   not the master key but a subkey `HKDF-SHA256(master, salt = "reward-token/v1",
//!   info = key id | period)`, a fresh one every minute.
//! - **AAD** = len | user id | len | activity id (LEB128 lengths): a token opens only
//!   for the user and activity it was issued to. Version 1 also put the 19-byte header
//!   in the AAD, with 4-byte lengths;
//!   version 2 leaves it out because every header field is already authenticated
//!   another way: the key id and period select the subkey and the nonce enters GCM
//!   itself, so a changed one fails the tag; and a version byte flipped to 1 makes
//!   the opener add the header to the AAD, which fails the tag too. Dropping it, and
//!   one-byte lengths, bring the usual AAD from 3 GHASH blocks to 1 (BENCHMARKS.md,
//!   token mint). Tokens sealed as version 1 keep opening.
//!
//! # Nonce budget
//! Random 96-bit nonces are safe for about 2^32 seals per key (NIST SP 800-38D; the
//! collision probability stays below 2^-32). Under a single key the source design's
//! 3.5 M tokens/s would use that up in about 20 minutes. With a subkey per minute the
//! bound is 2^32 seals *per minute* across the whole fleet, i.e. 71 M seals/s sustained,
//! 20x the source's peak; at 3.5 M/s a minute holds 2.1e8 seals and the chance of any
//! nonce repeating within it is about 2^-42. No coordination between instances is
//! needed (unlike counter nonces), and the subkey derivation is paid once a minute per
//! instance, not per token.
//!
//! # What opening tells
//! [`TokenCodec::open`] returns the token or an [`Illegal`] reason. It does not say
//! whether the server still holds the token (legal vs unknown): that is the token store's
//! question.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes256Gcm, Key, Nonce, Tag};
use arc_swap::ArcSwapOption;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hkdf::Hkdf;
use prost::Message;
use proto::v1::RewardToken;
use sha2::Sha256;

use super::keyring::{KeyId, KeyRing};
use super::proof::EventProofs;

/// The format version this build seals.
pub const FORMAT_VERSION: u8 = 2;
/// The first format (header in the AAD); opened, no longer sealed.
const FORMAT_V1: u8 = 1;
/// Length of one period, whose subkey seals every token of that minute.
pub const PERIOD_MS: i64 = 60_000;
const HEADER_LEN: usize = 1 + 2 + 4 + 12;
const TAG_LEN: usize = 16;
const HKDF_SALT: &[u8] = b"reward-token/v1";
/// Opened-subkey cache size (distinct key id × minute pairs); cleared when full.
const OPEN_CACHE_MAX: usize = 1024;

/// Why a token does not open. Wallets show such a token to nobody.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Illegal {
    /// Not URL-safe base64.
    #[error("token is not base64url")]
    BadBase64,
    /// Shorter than a header and a tag.
    #[error("token is truncated")]
    Truncated,
    /// A format version this build does not know.
    #[error("token format version {0} is unknown")]
    BadVersion(u8),
    /// Sealed under a key this ring does not hold (retired or forged).
    #[error("token key id {0} is unknown")]
    UnknownKey(KeyId),
    /// The tag does not verify: tampered, forged, or presented for another user or
    /// activity.
    #[error("token does not authenticate (tampered, forged, or another user's)")]
    Forged,
    /// Authenticated but the plaintext is not a token (sealed by a buggy issuer).
    #[error("token plaintext is not a RewardToken")]
    BadProtobuf,
    /// Authenticated, but its fields name another user or activity than its binding.
    #[error("token fields do not match the user and activity it is bound to")]
    BindingMismatch,
}

/// Why sealing failed (only with a broken key ring or an absurd clock).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The current key id is missing from the ring.
    #[error("current key {0} is not in the ring")]
    NoCurrentKey(KeyId),
    /// The clock is before 1970 or past the format's year-10000 limit.
    #[error("clock value {0} ms cannot be sealed")]
    BadClock(i64),
    /// The AEAD refused (message too long).
    #[error("AES-GCM refused to seal")]
    Cipher,
    /// The encoding did not fit the size computed for it (a bug in the encoder).
    #[error("token encoding outgrew its computed size")]
    Encoding,
}

struct SubKey {
    key_id: KeyId,
    period: u32,
    cipher: Aes256Gcm,
}

/// Seals and opens tokens with a [`KeyRing`]. Cheap to share (`Arc`), safe to use from
/// many threads.
pub struct TokenCodec {
    ring: KeyRing,
    proofs: EventProofs,
    sealing: ArcSwapOption<SubKey>,
    opening: Mutex<HashMap<(KeyId, u32), Arc<Aes256Gcm>>>,
}

impl std::fmt::Debug for TokenCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCodec")
            .field("ring", &self.ring)
            .finish_non_exhaustive()
    }
}

fn derive(master: &[u8; 32], key_id: KeyId, period: u32) -> Aes256Gcm {
    let hk = Hkdf::<Sha256>::new(Some(HKDF_SALT), master);
    let mut info = [0u8; 6];
    info[..2].copy_from_slice(&key_id.to_be_bytes());
    info[2..].copy_from_slice(&period.to_be_bytes());
    let mut okm = zeroize::Zeroizing::new([0u8; 32]);
    // 32 bytes is far below HKDF-SHA256's 8160-byte output limit: cannot fail.
    let _ = hk.expand(&info, okm.as_mut_slice());
    Aes256Gcm::new(&Key::<Aes256Gcm>::from(*okm))
}

/// The nonce field of a header (bytes 7..19; callers checked the length).
fn nonce_of(header: &[u8]) -> Nonce<aes_gcm::aead::consts::U12> {
    let mut nonce = Nonce::default();
    nonce.copy_from_slice(&header[7..HEADER_LEN]);
    nonce
}

/// A writer over a fixed slice, for the mint's encoder. A write past the end is not
/// made but remembered (`overflow`), so a wrong size bound is a typed error, never a
/// panic or a short token.
pub(super) struct SliceWriter<'a> {
    buf: &'a mut [u8],
    at: usize,
    overflow: bool,
}

impl<'a> SliceWriter<'a> {
    pub(super) fn new(buf: &'a mut [u8]) -> Self {
        SliceWriter {
            buf,
            at: 0,
            overflow: false,
        }
    }

    /// Bytes written, or `None` if a write did not fit.
    pub(super) fn written(&self) -> Option<usize> {
        (!self.overflow).then_some(self.at)
    }

    #[inline]
    fn byte(&mut self, b: u8) {
        match self.buf.get_mut(self.at) {
            Some(slot) => {
                *slot = b;
                self.at += 1;
            }
            None => self.overflow = true,
        }
    }

    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        match self.buf.get_mut(self.at..self.at + bytes.len()) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.at += bytes.len();
            }
            None => self.overflow = true,
        }
    }

    #[inline]
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte((v as u8) | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }
}

/// The most bytes [`encode_token`] can write for `t` (exact for the strings, the
/// integers counted at their widest).
pub(super) fn encoded_bound(t: &RewardToken) -> usize {
    let string = |s: &str| 1 + prost::encoding::encoded_len_varint(s.len() as u64) + s.len();
    string(&t.trade_no)
        + string(&t.user_id)
        + string(&t.activity_id)
        + string(&t.scene_id)
        + string(&t.reward_type)
        + string(&t.description)
        + string(&t.app_id)
        + 3 * (1 + 10)
}

/// Writes `t`'s protobuf encoding: the same bytes as prost's `encode_to_vec` (fields
/// in number order, default values left out; a property test holds the two equal).
/// It exists for speed: prost's `encode` walks every field twice (once for
/// `encoded_len`) and goes through the generic `BufMut` per piece, a real share of the
/// mint's encoding cost (docs/findings/benchmarks-history.md). A field added to
/// `RewardToken` must be added here too: the property test builds the token with every
/// field named, so it stops compiling until it is updated, and then fails until this
/// is.
pub(super) fn encode_token(t: &RewardToken, w: &mut SliceWriter<'_>) {
    // Field numbers 1..=15 fit the key in one byte: (number << 3) | wire type.
    let string = |w: &mut SliceWriter<'_>, field: u8, s: &str| {
        if !s.is_empty() {
            w.byte(field << 3 | 2);
            w.varint(s.len() as u64);
            w.put(s.as_bytes());
        }
    };
    let int64 = |w: &mut SliceWriter<'_>, field: u8, v: i64| {
        if v != 0 {
            w.byte(field << 3);
            // int64 is encoded as the two's-complement u64 (ten bytes when negative).
            w.varint(v as u64);
        }
    };
    string(w, 1, &t.trade_no);
    string(w, 2, &t.user_id);
    string(w, 3, &t.activity_id);
    string(w, 4, &t.scene_id);
    string(w, 5, &t.reward_type);
    int64(w, 6, t.amount);
    int64(w, 7, t.grant_time_ms);
    string(w, 8, &t.description);
    int64(w, 9, t.expires_at_ms);
    string(w, 10, &t.app_id);
}

/// Sealed tokens up to this size are built on the stack (the usual token is ~110
/// bytes); larger ones in a heap buffer.
const SEAL_STACK: usize = 256;

/// AADs up to this size are built on the stack (the usual ids are far shorter; a
/// larger array costs more to zero on every call).
pub(super) const AAD_STACK: usize = 64;

/// Calls `f` with a token's AAD, built on the stack when it fits (one heap allocation
/// fewer per seal and open):
/// - version 1: `header | len | user id | len | activity id`, lengths as big-endian u32;
/// - version 2: `len | user id | len | activity id`, lengths as LEB128 varints, so the
///   usual ids (a user id and an activity id of up to 14 bytes together) fit one
///   16-byte GHASH block.
fn with_aad<R>(
    version: u8,
    header: &[u8],
    user_id: &str,
    activity_id: &str,
    f: impl FnOnce(&[u8]) -> R,
) -> R {
    let v1 = version == FORMAT_V1;
    let len = if v1 { header.len() + 8 } else { 2 * 10 } + user_id.len() + activity_id.len();
    let fill = |out: &mut [u8]| -> usize {
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        if v1 {
            put(header);
        }
        for part in [user_id, activity_id] {
            if v1 {
                put(&(part.len() as u32).to_be_bytes());
            } else if part.len() < 0x80 {
                // The usual case: a one-byte varint, without the general encoder.
                put(&[part.len() as u8]);
            } else {
                let mut varint = [0u8; 10];
                let mut rest = &mut varint[..];
                prost::encoding::encode_varint(part.len() as u64, &mut rest);
                let used = 10 - rest.len();
                put(&varint[..used]);
            }
            put(part.as_bytes());
        }
        at
    };
    if len <= AAD_STACK {
        let mut stack = [0u8; AAD_STACK];
        let n = fill(&mut stack[..len]);
        f(&stack[..n])
    } else {
        let mut heap = vec![0u8; len];
        let n = fill(&mut heap);
        f(&heap[..n])
    }
}

impl TokenCodec {
    /// A codec sealing with the ring's current key.
    pub fn new(ring: KeyRing) -> Self {
        Self {
            proofs: EventProofs::new(&ring),
            ring,
            sealing: ArcSwapOption::empty(),
            opening: Mutex::new(HashMap::new()),
        }
    }

    /// The ring in use.
    pub fn ring(&self) -> &KeyRing {
        &self.ring
    }

    /// Event proofs under the same ring ([`super::proof`]).
    pub fn proofs(&self) -> &EventProofs {
        &self.proofs
    }

    /// Seals `token` now; the result is what the user keeps.
    pub fn seal(&self, token: &RewardToken) -> Result<String, SealError> {
        self.seal_at(token, reward_runtime::clock::now_ms())
    }

    /// Seals `token` as of `now_ms` (Unix ms), which picks the period subkey.
    pub fn seal_at(&self, token: &RewardToken, now_ms: i64) -> Result<String, SealError> {
        self.seal_as(token, now_ms, FORMAT_VERSION)
    }

    /// Seals in the old version 1 format (tests of backward compatibility).
    #[cfg(test)]
    pub(crate) fn seal_v1_at(&self, token: &RewardToken, now_ms: i64) -> Result<String, SealError> {
        self.seal_as(token, now_ms, FORMAT_V1)
    }

    fn seal_as(&self, token: &RewardToken, now_ms: i64, version: u8) -> Result<String, SealError> {
        let period = u32::try_from(now_ms.div_euclid(PERIOD_MS))
            .ok()
            .filter(|_| now_ms >= 0)
            .ok_or(SealError::BadClock(now_ms))?;
        let key_id = self.ring.current_id();
        // A guard, not `load_full`: the common case (this minute's subkey is cached)
        // then costs no reference-count traffic on a counter every thread shares.
        let cached = self.sealing.load();
        let fresh;
        let sub: &SubKey = match cached.as_ref() {
            Some(sub) if sub.period == period && sub.key_id == key_id => sub,
            _ => {
                let master = self
                    .ring
                    .key(key_id)
                    .ok_or(SealError::NoCurrentKey(key_id))?;
                fresh = Arc::new(SubKey {
                    key_id,
                    period,
                    cipher: derive(master, key_id, period),
                });
                self.sealing.store(Some(fresh.clone()));
                &fresh
            }
        };

        let bound = HEADER_LEN + encoded_bound(token) + TAG_LEN;
        if bound <= SEAL_STACK {
            // The usual case: no heap buffer besides the returned text (cheaper than
            // a `Vec` here; BENCHMARKS.md, token mint).
            let mut stack = [0u8; SEAL_STACK];
            seal_into(sub, version, key_id, period, token, &mut stack)
        } else {
            seal_into(sub, version, key_id, period, token, &mut vec![0u8; bound])
        }
    }

    /// Opens a sealed token presented for `user_id` and `activity_id`.
    pub fn open(
        &self,
        sealed: &str,
        user_id: &str,
        activity_id: &str,
    ) -> Result<RewardToken, Illegal> {
        let mut buf = URL_SAFE_NO_PAD
            .decode(sealed.trim_end_matches('='))
            .map_err(|_| Illegal::BadBase64)?;
        if buf.len() < HEADER_LEN + TAG_LEN {
            return Err(Illegal::Truncated);
        }
        let version = buf[0];
        if version != FORMAT_VERSION && version != FORMAT_V1 {
            return Err(Illegal::BadVersion(version));
        }
        let key_id = KeyId::from_be_bytes([buf[1], buf[2]]);
        let period = u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]);
        let cipher = self.opening_cipher(key_id, period)?;
        let tag_at = buf.len() - TAG_LEN;
        let (rest, tag) = buf.split_at_mut(tag_at);
        let mut tag_array = Tag::<aes_gcm::aead::consts::U16>::default();
        tag_array.copy_from_slice(tag);
        let (header, body) = rest.split_at_mut(HEADER_LEN);
        let nonce = nonce_of(header);
        with_aad(version, header, user_id, activity_id, |aad| {
            cipher.decrypt_inout_detached(&nonce, aad, body.into(), &tag_array)
        })
        .map_err(|_| Illegal::Forged)?;
        let token = RewardToken::decode(&*body).map_err(|_| Illegal::BadProtobuf)?;
        if token.user_id != user_id || token.activity_id != activity_id {
            return Err(Illegal::BindingMismatch);
        }
        Ok(token)
    }

    fn opening_cipher(&self, key_id: KeyId, period: u32) -> Result<Arc<Aes256Gcm>, Illegal> {
        let master = self.ring.key(key_id).ok_or(Illegal::UnknownKey(key_id))?;
        let mut cache = self.opening.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.get(&(key_id, period)) {
            return Ok(c.clone());
        }
        if cache.len() >= OPEN_CACHE_MAX {
            cache.clear();
        }
        let c = Arc::new(derive(master, key_id, period));
        cache.insert((key_id, period), c.clone());
        Ok(c)
    }
}

/// Seals `token` into `out` (at least `HEADER_LEN + encoded_bound + TAG_LEN` long)
/// and answers its base64 text.
fn seal_into(
    sub: &SubKey,
    version: u8,
    key_id: KeyId,
    period: u32,
    token: &RewardToken,
    out: &mut [u8],
) -> Result<String, SealError> {
    // The nonce is kept in its own variable for the cipher rather than read back
    // from the buffer: the read-back stalled on store forwarding (perf annotate).
    let nonce = Nonce::from(rand::random::<[u8; 12]>());
    let mut w = SliceWriter::new(out);
    w.byte(version);
    w.put(&key_id.to_be_bytes());
    w.put(&period.to_be_bytes());
    w.put(&nonce);
    encode_token(token, &mut w);
    let body_end = w.written().ok_or(SealError::Encoding)?;
    let sealed_len = body_end + TAG_LEN;
    let sealed = out.get_mut(..sealed_len).ok_or(SealError::Encoding)?;
    let (head_body, tag_room) = sealed.split_at_mut(body_end);
    let (header, body) = head_body.split_at_mut(HEADER_LEN);
    let tag = with_aad(version, header, &token.user_id, &token.activity_id, |aad| {
        sub.cipher.encrypt_inout_detached(&nonce, aad, body.into())
    })
    .map_err(|_| SealError::Cipher)?;
    tag_room.copy_from_slice(tag.as_slice());
    // SIMD base64 for the hot path (the scalar `base64` engine is a large share of a
    // mint; docs/findings/benchmarks-history.md). Both produce the same unpadded
    // base64url text, and `open` keeps the scalar engine, whose strict decoding
    // rejects non-canonical trailing bits.
    Ok(base64_simd::URL_SAFE_NO_PAD.encode_to_string(&*sealed))
}
