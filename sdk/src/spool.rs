//! The durable spool: where accepted rewards wait when no broker takes them.
//!
//! The source design's last resort was to log the event as base64 and reconcile by
//! hand. Here, when both producers of a queue stay down past a window, events are
//! appended to local files that survive a `kill -9` and are replayed, oldest first,
//! when a broker answers again, including after a restart of the process.
//!
//! # Format
//! A spool is a directory of segment files `NNNNNNNNNNNNNNNNNNNN.spool` (a sequence
//! number, so the names sort in write order). A segment is a run of records:
//!
//! ```text
//! u32 LE  payload length
//! u32 LE  CRC-32 (IEEE) of the payload
//! payload, keyed:  0xFF, u8 queue-name length, queue name, u16 LE key length, key,
//!                  the encoded message
//! payload, older:  u8 queue-name length (< 255), queue name, the encoded message
//! ```
//!
//! A keyed record keeps the message's partition key, so a replayed message goes out
//! under the key it was sent with: a requeued event keeps `trade_no{retry}` (not its
//! first key, which would put it behind its own earlier copy), a dead letter its own.
//! Records of the older layout (no key) still read; their key is the event's trade
//! number, as before. Queue names are at most 254 bytes, so `0xFF` never starts an
//! older record.
//!
//! # Guarantees
//! - A record counts as spooled only after the `fdatasync` of its batch: appends are
//!   buffered and [`Spool::sync`] makes a whole batch durable with one flush, so the
//!   disk sees one sync per batch, not per reward.
//! - A crash can tear only the tail of the segment being written. Reading stops at the
//!   first record whose length runs past the end or whose checksum fails; such a tail
//!   is counted in [`Replay::torn`], never returned as data. Records before it are intact.
//! - Replay is at-least-once: a segment is deleted only after the caller confirms that
//!   every record in it reached a broker ([`Spool::ack`]); a crash in between replays it
//!   again, and the reward service's idempotency absorbs the repeat.
//! - The spool is bounded ([`Spool::open`]'s `max_bytes`): past it, [`SpoolError::Full`]
//!   and the caller falls back to logging.
//! - Replay goes one segment at a time ([`Spool::take`] hands out the oldest), and a
//!   segment is cut every [`SEGMENT_BYTES`]: replay memory stays bounded by one
//!   segment whatever the spool holds, and a failure half-way repeats only the segment
//!   it happened in, not everything delivered before it.
//!
//! ```
//! # fn main() -> Result<(), sdk::spool::SpoolError> {
//! let dir = std::env::temp_dir().join(format!("spool-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let mut spool = sdk::spool::Spool::open(&dir, 1 << 20)?;
//! spool.append("massive", b"event-1")?;
//! spool.append("massive", b"event-2")?;
//! spool.sync()?;
//! // Later (or after a restart): take the sealed segments and replay them.
//! let replay = spool.take()?;
//! assert_eq!(replay.records.len(), 2);
//! assert_eq!(replay.records[0].queue, "massive");
//! spool.ack(&replay)?; // both reached a broker: the segments go
//! assert_eq!(spool.bytes(), 0);
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(()) }
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

const HEADER: usize = 8;
/// Largest record payload accepted (an event is at most
/// `proto::limits::MAX_EVENT_BYTES`, about 9 KiB, and usually a few hundred bytes).
pub const MAX_RECORD: usize = 1 << 20;
/// A segment is sealed and a new one started once it holds this many bytes
/// (about 20 000 events).
pub const SEGMENT_BYTES: u64 = 8 << 20;

/// Spool failures.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// A file operation failed.
    #[error("spool {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The spool holds `max_bytes` already.
    #[error("spool full: {bytes} bytes of {max_bytes}")]
    Full {
        /// Bytes held.
        bytes: u64,
        /// The bound.
        max_bytes: u64,
    },
    /// A record is larger than [`MAX_RECORD`], its queue name longer than 254 bytes
    /// or its key longer than 65 535.
    #[error("record too large: queue name {queue_len} bytes, payload {payload_len} bytes")]
    TooLarge {
        /// Queue name length.
        queue_len: usize,
        /// Payload length.
        payload_len: usize,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One spooled event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The virtual queue it was meant for.
    pub queue: String,
    /// Its partition key (`None` for a record of the older layout).
    pub key: Option<String>,
    /// The encoded event.
    pub payload: Vec<u8>,
}

/// The first byte of a keyed record's body.
const KEYED: u8 = 0xFF;

/// The records of the segment handed out by [`Spool::take`] (none when the spool is
/// empty).
#[derive(Debug, Default)]
pub struct Replay {
    /// Intact records, oldest first.
    pub records: Vec<Record>,
    /// Bytes of torn tails skipped (a crash mid-write), summed over segments.
    pub torn: u64,
    segment: Option<PathBuf>,
}

impl Replay {
    /// Whether no segment was handed out: the spool had nothing left to replay. (A
    /// segment whose records were all torn is not empty: acknowledge it to delete it.)
    pub fn is_empty(&self) -> bool {
        self.segment.is_none()
    }
}

/// An open spool directory. One writer per directory (the SDK owns it).
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    /// Bytes in every segment, the open one included.
    bytes: u64,
    next_seq: u64,
    current: Option<(PathBuf, BufWriter<File>)>,
    /// Bytes written to the open segment.
    current_bytes: u64,
    /// Size at which the open segment is sealed.
    segment_bytes: u64,
    /// Segments taken for replay but not acknowledged yet.
    in_replay: Vec<PathBuf>,
}

fn segment_name(seq: u64) -> String {
    format!("{seq:020}.spool")
}

fn parse_seq(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    name.strip_suffix(".spool")?.parse().ok()
}

impl Spool {
    /// Opens (creating if needed) the spool in `dir`, holding at most `max_bytes`.
    /// Segments left by an earlier process are kept for [`Spool::take`].
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Self, SpoolError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let mut spool = Self {
            dir: dir.to_path_buf(),
            max_bytes,
            bytes: 0,
            next_seq: 0,
            current: None,
            current_bytes: 0,
            segment_bytes: SEGMENT_BYTES,
            in_replay: Vec::new(),
        };
        for path in spool.segments()? {
            let len = fs::metadata(&path).map_err(io_err(&path))?.len();
            spool.bytes += len;
            if let Some(seq) = parse_seq(&path) {
                spool.next_seq = spool.next_seq.max(seq + 1);
            }
        }
        Ok(spool)
    }

    /// Seals segments at `bytes` instead of [`SEGMENT_BYTES`] (at least one record
    /// per segment).
    #[must_use]
    pub fn with_segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes.max(1);
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes held on disk (written, synced or not).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether no segment holds data.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    fn segments(&self) -> Result<Vec<PathBuf>, SpoolError> {
        let mut out: Vec<PathBuf> = fs::read_dir(&self.dir)
            .map_err(io_err(&self.dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| parse_seq(p).is_some())
            .collect();
        out.sort();
        Ok(out)
    }

    /// Appends one record without a key (the older layout: on replay its key is the
    /// event's trade number). Buffered; durable after the next [`Spool::sync`].
    pub fn append(&mut self, queue: &str, payload: &[u8]) -> Result<(), SpoolError> {
        self.append_record(queue, None, payload)
    }

    /// Appends one record with its partition key (buffered; durable after the next
    /// [`Spool::sync`]).
    pub fn append_keyed(
        &mut self,
        queue: &str,
        key: &str,
        payload: &[u8],
    ) -> Result<(), SpoolError> {
        self.append_record(queue, Some(key), payload)
    }

    fn append_record(
        &mut self,
        queue: &str,
        key: Option<&str>,
        payload: &[u8],
    ) -> Result<(), SpoolError> {
        let key_len = key.map_or(0, str::len);
        let head_len = match key {
            Some(_) => 1 + 1 + queue.len() + 2 + key_len,
            None => 1 + queue.len(),
        };
        if queue.len() > 254
            || key_len > usize::from(u16::MAX)
            || payload.len() + head_len > MAX_RECORD
        {
            return Err(SpoolError::TooLarge {
                queue_len: queue.len(),
                payload_len: payload.len(),
            });
        }
        let mut head = Vec::with_capacity(head_len);
        if key.is_some() {
            head.push(KEYED);
        }
        // Both lengths fit their fields: checked above.
        head.push(u8::try_from(queue.len()).unwrap_or(u8::MAX));
        head.extend_from_slice(queue.as_bytes());
        if let Some(k) = key {
            head.extend_from_slice(&u16::try_from(k.len()).unwrap_or(u16::MAX).to_le_bytes());
            head.extend_from_slice(k.as_bytes());
        }
        let body_len = head.len() + payload.len();
        let total = (HEADER + body_len) as u64;
        if self.bytes + total > self.max_bytes {
            return Err(SpoolError::Full {
                bytes: self.bytes,
                max_bytes: self.max_bytes,
            });
        }
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&head);
        hasher.update(payload);
        let crc = hasher.finalize();
        let (path, w) = self.writer()?;
        let res = (|| {
            w.write_all(&u32::try_from(body_len).unwrap_or(u32::MAX).to_le_bytes())?;
            w.write_all(&crc.to_le_bytes())?;
            w.write_all(&head)?;
            w.write_all(payload)
        })();
        res.map_err(io_err(&path))?;
        self.bytes += total;
        self.current_bytes += total;
        if self.current_bytes >= self.segment_bytes {
            // Seal it: durable before it can be handed out, then a fresh one.
            self.sync()?;
            self.current = None;
            self.current_bytes = 0;
        }
        Ok(())
    }

    fn writer(&mut self) -> Result<(PathBuf, &mut BufWriter<File>), SpoolError> {
        if self.current.is_none() {
            let path = self.dir.join(segment_name(self.next_seq));
            self.next_seq += 1;
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(io_err(&path))?;
            // Make the new file's name durable too.
            if let Ok(d) = File::open(&self.dir) {
                let _ = d.sync_all();
            }
            self.current = Some((path, BufWriter::with_capacity(256 * 1024, file)));
        }
        match self.current.as_mut() {
            Some((p, w)) => Ok((p.clone(), w)),
            None => Err(SpoolError::Io {
                path: self.dir.clone(),
                source: io::Error::other("no open segment"),
            }),
        }
    }

    /// Makes every appended record durable (one write and one `fdatasync`).
    pub fn sync(&mut self) -> Result<(), SpoolError> {
        if let Some((path, w)) = self.current.as_mut() {
            w.flush().map_err(io_err(path))?;
            w.get_ref().sync_data().map_err(io_err(path))?;
        }
        Ok(())
    }

    /// Hands out the oldest segment not already handed out (and not acknowledged), for
    /// replay; if that is the open segment, it is synced and sealed first. An empty
    /// [`Replay`] (no records, nothing to acknowledge) means there is nothing left.
    pub fn take(&mut self) -> Result<Replay, SpoolError> {
        let mut replay = Replay::default();
        let Some(path) = self
            .segments()?
            .into_iter()
            .find(|p| !self.in_replay.contains(p))
        else {
            return Ok(replay);
        };
        if self.current.as_ref().is_some_and(|(c, _)| *c == path) {
            self.sync()?;
            self.current = None;
            self.current_bytes = 0;
        }
        replay.torn = read_segment(&path, &mut replay.records)?;
        self.in_replay.push(path.clone());
        replay.segment = Some(path);
        Ok(replay)
    }

    /// Every record of `replay` reached a broker: delete its segment.
    pub fn ack(&mut self, replay: &Replay) -> Result<(), SpoolError> {
        if let Some(path) = &replay.segment {
            let len = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(path)(e)),
            }
            self.bytes = self.bytes.saturating_sub(len);
            self.in_replay.retain(|p| p != path);
        }
        Ok(())
    }

    /// The replay failed part-way: its segment may be handed out again.
    pub fn release(&mut self, replay: &Replay) {
        self.in_replay
            .retain(|p| Some(p) != replay.segment.as_ref());
    }
}

/// Reads a segment's intact records into `out`; returns the torn bytes at its end.
fn read_segment(path: &Path, out: &mut Vec<Record>) -> Result<u64, SpoolError> {
    let mut data = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut data))
        .map_err(io_err(path))?;
    Ok(parse_segment(&data, out))
}

/// The intact records at the front of a segment's bytes, into `out`; returns the
/// bytes left unread (a torn or corrupt tail).
fn parse_segment(data: &[u8], out: &mut Vec<Record>) -> u64 {
    let mut at = 0usize;
    while at < data.len() {
        let Some((rec, used)) = parse_record(&data[at..]) else {
            break;
        };
        out.push(rec);
        at += used;
    }
    (data.len() - at) as u64
}

/// One record from the front of `buf`, and the bytes it used; `None` if torn/corrupt.
fn parse_record(buf: &[u8]) -> Option<(Record, usize)> {
    let len = u32::from_le_bytes(buf.get(0..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(buf.get(4..8)?.try_into().ok()?);
    if len == 0 || len > MAX_RECORD {
        return None;
    }
    let body = buf.get(HEADER..HEADER + len)?;
    if crc32fast::hash(body) != crc {
        return None;
    }
    let keyed = *body.first()? == KEYED;
    let at = usize::from(keyed);
    let qlen = usize::from(*body.get(at)?);
    let queue = std::str::from_utf8(body.get(at + 1..at + 1 + qlen)?)
        .ok()?
        .to_string();
    let mut at = at + 1 + qlen;
    let key = if keyed {
        let klen = usize::from(u16::from_le_bytes(body.get(at..at + 2)?.try_into().ok()?));
        let key = std::str::from_utf8(body.get(at + 2..at + 2 + klen)?)
            .ok()?
            .to_string();
        at += 2 + klen;
        Some(key)
    } else {
        None
    };
    let payload = body.get(at..)?.to_vec();
    Some((
        Record {
            queue,
            key,
            payload,
        },
        HEADER + len,
    ))
}

#[cfg(test)]
mod tests;
