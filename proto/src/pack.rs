//! Compound broker records: many encoded events in one broker record.
//!
//! Every broker record costs the brokers a record's bookkeeping (Kafka's batches carry
//! per-record headers and offsets; RocketMQ indexes every message), the
//! producer a delivery report and the consumer an offset to track. The SDK therefore
//! packs the events of one send into a few records (`queues.<q>.pack_events` per
//! record) and the consumer unpacks them and settles each event on its own.
//!
//! # Wire format, version 1
//! ```text
//! 0x87 'R' 'P'                  magic (3 bytes)
//! 0x01                          version
//! varint  n                     events in the record, 1..=MAX_EVENTS
//! n times:
//!   varint  key length          0..=MAX_KEY_BYTES, then the key (UTF-8): the event's
//!   key bytes                   partition key as the SDK was given it
//!   varint  payload length      then the event's bytes, exactly as a single-event
//!   payload bytes               record would carry them
//! ```
//! Varints are protobuf's (LEB128, at most 10 bytes). Nothing may follow the last
//! event. The first byte, 0x87, cannot begin a protobuf message (its low three bits
//! are wire type 7, which does not exist), so a reader tells a pack from an old
//! single-event record by its first byte alone and both read side by side
//! ([`unpack`]). The encoding is pinned by golden tests (`tests/pack.rs`); a new
//! layout takes a new version byte, and readers refuse versions they do not know
//! ([`PackError::Version`]) rather than guess.

use bytes::Bytes;

/// The first three bytes of every pack.
pub const MAGIC: [u8; 3] = [0x87, b'R', b'P'];
/// The version this crate writes.
pub const VERSION: u8 = 1;
/// Most events in one pack (a reader refuses more, so one record can never turn into
/// more work than this: a hostile record of tiny entries is a thousand dead letters
/// at most, and a reader's memory per record stays bounded).
pub const MAX_EVENTS: usize = 1_000;
/// Longest key in a pack (a reader refuses longer).
pub const MAX_KEY_BYTES: usize = 1024;

/// One event out of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// Its partition key as the producer had it (`None` for a single-event record,
    /// whose key travels in the broker's own record key).
    pub key: Option<Bytes>,
    /// The encoded event (a slice of the record: no copy).
    pub payload: Bytes,
}

impl Packed {
    /// The key as text (`""` when the record had none). Keys are checked to be UTF-8
    /// when the pack is read.
    pub fn key_str(&self) -> &str {
        self.key
            .as_deref()
            .and_then(|k| std::str::from_utf8(k).ok())
            .unwrap_or("")
    }
}

/// Why a record that starts like a pack is not a valid one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    /// It ends before the header, a length or a field it announced.
    #[error("pack truncated at byte {0}")]
    Truncated(usize),
    /// A version this reader does not know.
    #[error("pack version {0} is not known (this reader knows 1)")]
    Version(u8),
    /// Zero events, or more than [`MAX_EVENTS`].
    #[error("pack announces {0} events (1..={MAX_EVENTS} allowed)")]
    Count(u64),
    /// A key longer than [`MAX_KEY_BYTES`].
    #[error("pack key of {0} bytes (at most {MAX_KEY_BYTES})")]
    KeyTooLong(u64),
    /// A key that is not UTF-8.
    #[error("pack key is not UTF-8")]
    KeyNotUtf8,
    /// A varint longer than 10 bytes.
    #[error("pack has a bad varint at byte {0}")]
    Varint(usize),
    /// Bytes after the last event.
    #[error("pack has {0} bytes after its last event")]
    Trailing(usize),
}

/// Whether `raw` is a pack (starts with [`MAGIC`]); anything else is a single event.
pub fn is_pack(raw: &[u8]) -> bool {
    raw.starts_with(&MAGIC)
}

/// Bytes a pack of these events takes (to size packs before encoding).
pub fn encoded_len<'a>(events: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> usize {
    let mut n = 0usize;
    let mut len = MAGIC.len() + 1;
    for (k, p) in events {
        n += 1;
        len += varint_len(k.len() as u64) + k.len() + varint_len(p.len() as u64) + p.len();
    }
    len + varint_len(n as u64)
}

/// Bytes one event adds to a pack.
pub fn entry_len(key: &str, payload: &[u8]) -> usize {
    varint_len(key.len() as u64) + key.len() + varint_len(payload.len() as u64) + payload.len()
}

/// Encodes events (key, payload) into one pack. The caller keeps to [`MAX_EVENTS`]
/// events and [`MAX_KEY_BYTES`] per key (the SDK's packer sends an event with a longer
/// key as its own single-event record, and its config caps `pack_events`); a pack
/// that breaks either is still written, and refused by readers.
///
/// ```
/// use proto::pack;
/// let raw = pack::encode(&[("t1", b"one".as_slice()), ("t2", b"two".as_slice())]);
/// let events = pack::unpack(bytes::Bytes::from(raw)).unwrap();
/// assert_eq!(events.len(), 2);
/// assert_eq!(events[1].key_str(), "t2");
/// assert_eq!(&events[1].payload[..], b"two");
/// ```
pub fn encode(events: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_len(events.iter().copied()));
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    put_varint(&mut out, events.len() as u64);
    for (k, p) in events {
        put_varint(&mut out, k.len() as u64);
        out.extend_from_slice(k.as_bytes());
        put_varint(&mut out, p.len() as u64);
        out.extend_from_slice(p);
    }
    out
}

/// The events of a record: a pack's events, or the record itself as one event when
/// it is not a pack (an old single-event record). Payloads are slices of `raw`.
pub fn unpack(raw: Bytes) -> Result<Vec<Packed>, PackError> {
    if !is_pack(&raw) {
        return Ok(vec![Packed {
            key: None,
            payload: raw,
        }]);
    }
    let mut at = MAGIC.len();
    let version = *raw.get(at).ok_or(PackError::Truncated(at))?;
    if version != VERSION {
        return Err(PackError::Version(version));
    }
    at += 1;
    let n = get_varint(&raw, &mut at)?;
    if n == 0 || n > MAX_EVENTS as u64 {
        return Err(PackError::Count(n));
    }
    // Every entry takes at least two bytes, so a count the bytes cannot hold is not
    // believed when reserving room.
    let room = (raw.len() - at) / 2;
    let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(room).min(room));
    for _ in 0..n {
        let klen = get_varint(&raw, &mut at)?;
        if klen > MAX_KEY_BYTES as u64 {
            return Err(PackError::KeyTooLong(klen));
        }
        let key = take(&raw, &mut at, klen)?;
        if std::str::from_utf8(&key).is_err() {
            return Err(PackError::KeyNotUtf8);
        }
        let plen = get_varint(&raw, &mut at)?;
        let payload = take(&raw, &mut at, plen)?;
        out.push(Packed {
            key: Some(key),
            payload,
        });
    }
    if at != raw.len() {
        return Err(PackError::Trailing(raw.len() - at));
    }
    Ok(out)
}

fn take(raw: &Bytes, at: &mut usize, len: u64) -> Result<Bytes, PackError> {
    let end = usize::try_from(len)
        .ok()
        .and_then(|l| at.checked_add(l))
        .filter(|e| *e <= raw.len())
        .ok_or(PackError::Truncated(raw.len()))?;
    let out = raw.slice(*at..end);
    *at = end;
    Ok(out)
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(raw: &[u8], at: &mut usize) -> Result<u64, PackError> {
    let start = *at;
    let mut v = 0u64;
    for i in 0..10 {
        let b = *raw.get(*at).ok_or(PackError::Truncated(*at))?;
        *at += 1;
        // The tenth byte holds only the 64th bit.
        if i == 9 && b > 1 {
            return Err(PackError::Varint(start));
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(PackError::Varint(start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_their_edges() {
        for v in [
            0u64,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            assert_eq!(buf.len(), varint_len(v));
            let mut at = 0;
            assert_eq!(get_varint(&buf, &mut at), Ok(v));
            assert_eq!(at, buf.len());
        }
    }

    #[test]
    fn encoded_len_is_exact() {
        let events = [("a", b"x".as_slice()), ("key-2", &[0u8; 300][..])];
        assert_eq!(encoded_len(events.iter().copied()), encode(&events).len());
        let by_entry: usize = events.iter().map(|(k, p)| entry_len(k, p)).sum();
        assert_eq!(encoded_len(events.iter().copied()), 4 + 1 + by_entry);
    }
}
