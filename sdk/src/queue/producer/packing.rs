//! Events packed into broker records, and each record's answer spread back to its
//! events.

use bytes::Bytes;

use super::record::OutMsg;

/// Most bytes of one compound record (under Kafka's default 1 MB message limit and
/// RocketMQ's 4 MB body limit, with room for the record's own framing).
pub const PACK_MAX_BYTES: usize = 512 * 1024;

/// Groups `items` (in order) into broker records of at most `per_record` events and
/// [`PACK_MAX_BYTES`] each: a group of several is one compound record
/// ([`proto::pack`], keyed by its first event's key, so the group lands in that key's
/// partition), a group of one is the event's own single-event record. An event whose
/// key is longer than a pack may carry ([`proto::pack::MAX_KEY_BYTES`]) always goes
/// alone, so it cannot make readers refuse the others. Answers each record with the
/// number of `items` it holds.
pub fn pack<T>(
    items: &[T],
    per_record: usize,
    key: impl Fn(&T) -> &str,
    payload: impl Fn(&T) -> &Bytes,
) -> Vec<(OutMsg, usize)> {
    let per_record = per_record.clamp(1, proto::pack::MAX_EVENTS);
    let mut out = Vec::with_capacity(items.len().div_ceil(per_record));
    let mut start = 0;
    while start < items.len() {
        // The group: as many as fit the count and the byte limit (at least one).
        let mut end = start;
        let mut bytes = proto::pack::MAGIC.len() + 1 + 3;
        while end < items.len() && end - start < per_record {
            let k = key(&items[end]);
            let add = proto::pack::entry_len(k, payload(&items[end]));
            let long = k.len() > proto::pack::MAX_KEY_BYTES;
            if end > start && (long || bytes + add > PACK_MAX_BYTES) {
                break;
            }
            if long {
                end += 1;
                break;
            }
            bytes += add;
            end += 1;
        }
        let group = &items[start..end];
        let msg = if let [one] = group {
            OutMsg {
                key: key(one).to_string(),
                payload: payload(one).clone(),
            }
        } else {
            let entries: Vec<(&str, &[u8])> = group
                .iter()
                .map(|i| (key(i), payload(i).as_ref()))
                .collect();
            OutMsg {
                key: key(&group[0]).to_string(),
                payload: Bytes::from(proto::pack::encode(&entries)),
            }
        };
        out.push((msg, group.len()));
        start = end;
    }
    out
}

/// Spreads one answer per record back to the records' events: `counts[i]` events
/// share record `i`'s answer; a record with no answer (a producer that answered
/// fewer) fails its events.
pub fn spread<E: Clone>(
    results: Vec<Result<(), E>>,
    counts: impl IntoIterator<Item = usize>,
) -> Vec<Option<Result<(), E>>> {
    let mut out = Vec::new();
    let mut results = results.into_iter();
    for n in counts {
        let r = results.next();
        out.extend(std::iter::repeat_n(r, n));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(n: usize, size: usize) -> Vec<OutMsg> {
        (0..n)
            .map(|i| OutMsg {
                key: format!("t{i}"),
                payload: Bytes::from(vec![u8::try_from(i % 251).unwrap_or(0); size]),
            })
            .collect()
    }

    fn unpacked(records: &[(OutMsg, usize)]) -> Vec<(String, Bytes)> {
        let mut out = Vec::new();
        for (r, n) in records {
            let events = proto::pack::unpack(r.payload.clone()).unwrap();
            assert_eq!(events.len(), *n);
            for e in events {
                let key = e
                    .key
                    .as_ref()
                    .map_or(r.key.clone(), |_| e.key_str().to_string());
                out.push((key, e.payload));
            }
        }
        out
    }

    #[test]
    fn packs_keep_every_event_once_in_order() {
        let m = msgs(250, 40);
        let records = pack(&m, 100, |m| &m.key, |m| &m.payload);
        assert_eq!(
            records.iter().map(|r| r.1).collect::<Vec<_>>(),
            [100, 100, 50]
        );
        assert_eq!(records[1].0.key, "t100");
        let back = unpacked(&records);
        let want: Vec<(String, Bytes)> = m
            .iter()
            .map(|m| (m.key.clone(), m.payload.clone()))
            .collect();
        assert_eq!(back, want);
    }

    #[test]
    fn one_per_record_writes_single_event_records() {
        let m = msgs(3, 10);
        let records = pack(&m, 1, |m| &m.key, |m| &m.payload);
        assert_eq!(records.len(), 3);
        for (r, src) in records.iter().zip(&m) {
            assert!(!proto::pack::is_pack(&r.0.payload));
            assert_eq!(r.0.payload, src.payload);
            assert_eq!(r.0.key, src.key);
        }
        // A last group of one is a single-event record too.
        let records = pack(&msgs(3, 10), 2, |m| &m.key, |m| &m.payload);
        assert!(proto::pack::is_pack(&records[0].0.payload));
        assert!(!proto::pack::is_pack(&records[1].0.payload));
    }

    #[test]
    fn the_byte_limit_splits_packs() {
        let m = msgs(10, 200 * 1024);
        let records = pack(&m, 100, |m| &m.key, |m| &m.payload);
        assert!(records.iter().all(|r| r.0.payload.len() <= PACK_MAX_BYTES));
        assert_eq!(records.iter().map(|r| r.1).sum::<usize>(), 10);
        assert_eq!(unpacked(&records).len(), 10);
        // An event whose key a pack cannot carry goes alone, between packs.
        let mut m = msgs(5, 10);
        m[2].key = "k".repeat(proto::pack::MAX_KEY_BYTES + 1);
        let records = pack(&m, 100, |m| &m.key, |m| &m.payload);
        assert_eq!(records.iter().map(|r| r.1).collect::<Vec<_>>(), [2, 1, 2]);
        assert!(!proto::pack::is_pack(&records[1].0.payload));
        assert_eq!(unpacked(&records).len(), 5);
        // An event larger than the limit still goes, alone.
        let huge = msgs(2, PACK_MAX_BYTES + 1);
        let records = pack(&huge, 100, |m| &m.key, |m| &m.payload);
        assert_eq!(records.iter().map(|r| r.1).collect::<Vec<_>>(), [1, 1]);
    }

    #[test]
    fn spread_gives_each_event_its_records_answer() {
        let r: Vec<Result<(), &str>> = vec![Ok(()), Err("x")];
        let s = spread(r, [2, 3, 1]);
        assert_eq!(
            s,
            vec![
                Some(Ok(())),
                Some(Ok(())),
                Some(Err("x")),
                Some(Err("x")),
                Some(Err("x")),
                None
            ]
        );
    }
}
