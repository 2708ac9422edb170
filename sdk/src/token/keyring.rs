//! Token keys: one current key seals, every listed key opens.
//!
//! Keys never live in the repository and never reach a log: `Debug` prints key ids
//! only, and key bytes are wiped from memory when the ring is dropped.
//!
//! Text form (file or env), one key per line or comma-separated:
//!
//! ```text
//! # id:base64 of 32 random bytes (standard or URL-safe alphabet)
//! 1:0sW3...=
//! 2:Qm9i...=
//! ```
//!
//! The current (sealing) key is the highest id unless chosen explicitly. Rotation:
//! add a key with a higher id to every instance's ring, then drop the old key once no
//! token sealed with it can still be presented (the token TTL).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use base64::Engine;
use zeroize::Zeroizing;

/// Env var holding the ring's text form.
pub const KEYS_ENV: &str = "REWARD_TOKEN_KEYS";
/// Env var naming a file holding the ring's text form (used when `KEYS_ENV` is unset).
pub const KEYS_FILE_ENV: &str = "REWARD_TOKEN_KEYS_FILE";
/// Env var choosing the sealing key id (default: the highest id).
pub const CURRENT_KEY_ENV: &str = "REWARD_TOKEN_CURRENT_KEY";

/// A key's id as carried in every sealed token.
pub type KeyId = u16;

/// Why a key ring could not be loaded. Never contains key material.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyRingError {
    /// Neither env var is set.
    #[error("no keys: set {keys} (id:base64 pairs) or {file} (a file of them)")]
    Missing {
        /// The variable holding the text form.
        keys: &'static str,
        /// The variable naming a file of it.
        file: &'static str,
    },
    /// The key file cannot be read.
    #[error("cannot read key file {path}: {reason}")]
    File {
        /// The path.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// An entry is not `id:base64`.
    #[error("key entry {entry} is malformed: {reason}")]
    Malformed {
        /// 1-based position of the entry (its text is not repeated: it may hold a key).
        entry: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// The same id twice.
    #[error("key id {0} appears twice")]
    DuplicateId(KeyId),
    /// No entries.
    #[error("the key ring is empty")]
    Empty,
    /// The chosen current key is not in the ring.
    #[error("current key id {0} is not in the ring")]
    UnknownCurrent(KeyId),
}

/// A set of 256-bit master keys and the id of the one that seals.
#[derive(Clone)]
pub struct KeyRing {
    keys: BTreeMap<KeyId, Zeroizing<[u8; 32]>>,
    current: KeyId,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing")
            .field("key_ids", &self.keys.keys().collect::<Vec<_>>())
            .field("current", &self.current)
            .finish()
    }
}

impl KeyRing {
    /// Parses the text form; `current` picks the sealing key (default: highest id).
    pub fn parse(text: &str, current: Option<KeyId>) -> Result<Self, KeyRingError> {
        let mut keys = BTreeMap::new();
        let entries = text
            .split([',', '\n'])
            .map(str::trim)
            .filter(|e| !e.is_empty() && !e.starts_with('#'));
        for (n, entry) in entries.enumerate() {
            let malformed = |reason| KeyRingError::Malformed {
                entry: n + 1,
                reason,
            };
            let (id, b64) = entry
                .split_once(':')
                .ok_or(malformed("expected id:base64"))?;
            let id: KeyId = id
                .trim()
                .parse()
                .map_err(|_| malformed("id is not a number 0..=65535"))?;
            let b64 = b64.trim();
            let bytes = Zeroizing::new(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(b64))
                    .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(b64))
                    .map_err(|_| malformed("key is not base64"))?,
            );
            let key: [u8; 32] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| malformed("key must be exactly 32 bytes"))?;
            if keys.insert(id, Zeroizing::new(key)).is_some() {
                return Err(KeyRingError::DuplicateId(id));
            }
        }
        let highest = *keys.keys().next_back().ok_or(KeyRingError::Empty)?;
        let current = current.unwrap_or(highest);
        if !keys.contains_key(&current) {
            return Err(KeyRingError::UnknownCurrent(current));
        }
        Ok(Self { keys, current })
    }

    /// Reads a file in the text form.
    pub fn from_file(path: &Path, current: Option<KeyId>) -> Result<Self, KeyRingError> {
        let text =
            Zeroizing::new(
                std::fs::read_to_string(path).map_err(|e| KeyRingError::File {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                })?,
            );
        Self::parse(&text, current)
    }

    /// Loads from `REWARD_TOKEN_KEYS`, else from the file `REWARD_TOKEN_KEYS_FILE`;
    /// `REWARD_TOKEN_CURRENT_KEY` picks the sealing key.
    pub fn from_env() -> Result<Self, KeyRingError> {
        Self::from_vars(KEYS_ENV, KEYS_FILE_ENV, CURRENT_KEY_ENV)
    }

    /// Loads from the variable `keys`, else from the file the variable `file` names;
    /// the variable `current` picks the sealing key (default: the highest id). The
    /// same text form and rotation as the token keys, for other key rings (the
    /// wallet sessions' keys, [`crate::session`]).
    pub fn from_vars(
        keys: &'static str,
        file: &'static str,
        current: &'static str,
    ) -> Result<Self, KeyRingError> {
        let chosen = match std::env::var(current) {
            Ok(v) if !v.trim().is_empty() => {
                Some(v.trim().parse().map_err(|_| KeyRingError::Malformed {
                    entry: 0,
                    reason: "the current key variable is not a number 0..=65535",
                })?)
            }
            _ => None,
        };
        if let Ok(text) = std::env::var(keys) {
            let text = Zeroizing::new(text);
            if !text.trim().is_empty() {
                return Self::parse(&text, chosen);
            }
        }
        match std::env::var_os(file) {
            Some(path) if !path.is_empty() => Self::from_file(Path::new(&path), chosen),
            _ => Err(KeyRingError::Missing { keys, file }),
        }
    }

    /// A ring of fresh random keys with ids `1..=n`, for tests and benchmarks.
    pub fn random(n: u16) -> Self {
        let keys = (1..=n.max(1))
            .map(|id| (id, Zeroizing::new(rand::random::<[u8; 32]>())))
            .collect();
        Self {
            keys,
            current: n.max(1),
        }
    }

    /// The sealing key's id.
    pub fn current_id(&self) -> KeyId {
        self.current
    }

    /// Every id in the ring, ascending.
    pub fn ids(&self) -> impl Iterator<Item = KeyId> + '_ {
        self.keys.keys().copied()
    }

    /// A copy of this ring that seals with `id`.
    pub fn with_current(mut self, id: KeyId) -> Result<Self, KeyRingError> {
        if !self.keys.contains_key(&id) {
            return Err(KeyRingError::UnknownCurrent(id));
        }
        self.current = id;
        Ok(self)
    }

    pub(crate) fn key(&self, id: KeyId) -> Option<&[u8; 32]> {
        self.keys.get(&id).map(|k| &**k)
    }

    /// The text form of this ring (for writing a key file in tests and tools).
    pub fn to_text(&self) -> Zeroizing<String> {
        let mut out = String::new();
        for (id, key) in &self.keys {
            out.push_str(&format!(
                "{id}:{}\n",
                base64::engine::general_purpose::STANDARD.encode(key.as_slice())
            ));
        }
        Zeroizing::new(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    #[test]
    fn parses_pairs_and_picks_highest_as_current() {
        let ring = KeyRing::parse(&format!("# comment\n1:{K1}\n7:{K1}"), None).unwrap();
        assert_eq!(ring.ids().collect::<Vec<_>>(), vec![1, 7]);
        assert_eq!(ring.current_id(), 7);
        let ring = KeyRing::parse(&format!("1:{K1},7:{K1}"), Some(1)).unwrap();
        assert_eq!(ring.current_id(), 1);
    }

    #[test]
    fn typed_errors_never_echo_key_material() {
        let one = format!("1:{K1}");
        let cases = [
            ("", None, KeyRingError::Empty),
            (
                "nocolon",
                None,
                KeyRingError::Malformed {
                    entry: 1,
                    reason: "expected id:base64",
                },
            ),
            (
                "x:abc",
                None,
                KeyRingError::Malformed {
                    entry: 1,
                    reason: "id is not a number 0..=65535",
                },
            ),
            (
                "1:!!!secret!!!",
                None,
                KeyRingError::Malformed {
                    entry: 1,
                    reason: "key is not base64",
                },
            ),
            (
                "1:AAAA",
                None,
                KeyRingError::Malformed {
                    entry: 1,
                    reason: "key must be exactly 32 bytes",
                },
            ),
            (one.as_str(), Some(2), KeyRingError::UnknownCurrent(2)),
        ];
        for (text, current, want) in cases {
            let err = KeyRing::parse(text, current).unwrap_err();
            assert_eq!(err, want, "{text}");
            assert!(!err.to_string().contains("secret"));
        }
        assert_eq!(
            KeyRing::parse(&format!("1:{K1}\n1:{K1}"), None).unwrap_err(),
            KeyRingError::DuplicateId(1)
        );
    }

    #[test]
    fn debug_shows_ids_only() {
        let ring = KeyRing::parse(&format!("3:{K1}"), None).unwrap();
        let shown = format!("{ring:?}");
        assert!(shown.contains('3'));
        assert!(!shown.contains(K1) && !shown.contains("AAEC"), "{shown}");
    }

    #[test]
    fn text_form_round_trips() {
        let ring = KeyRing::random(3);
        let back = KeyRing::parse(&ring.to_text(), None).unwrap();
        assert_eq!(back.ids().collect::<Vec<_>>(), vec![1, 2, 3]);
        for id in 1..=3 {
            assert_eq!(back.key(id), ring.key(id));
        }
    }
}
