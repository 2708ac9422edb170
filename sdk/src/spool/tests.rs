//! Unit tests of the spool: reopening, torn and corrupt segments, segment cutting,
//! the size bound, the older record layout, and property tests of the reader.

use super::*;
use proptest::prelude::*;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "reward-spool-{name}-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ));
    let _ = fs::remove_dir_all(&d);
    d
}

#[test]
fn survives_reopen_and_replays_in_order() {
    let dir = tmp("reopen");
    {
        let mut s = Spool::open(&dir, 1 << 20).unwrap();
        for i in 0..100u32 {
            s.append(if i % 2 == 0 { "a" } else { "b" }, &i.to_le_bytes())
                .unwrap();
        }
        s.sync().unwrap();
    } // dropped without take: a crash after sync
    let mut s = Spool::open(&dir, 1 << 20).unwrap();
    assert!(!s.is_empty());
    s.append("a", &100u32.to_le_bytes()).unwrap();
    let as_u32 = |r: &Replay| -> Vec<u32> {
        r.records
            .iter()
            .map(|r| u32::from_le_bytes(r.payload.clone().try_into().unwrap()))
            .collect()
    };
    // The old process's segment first, then the one this process opened.
    let old = s.take().unwrap();
    assert_eq!(as_u32(&old), (0..100).collect::<Vec<_>>());
    assert_eq!(old.torn, 0);
    let new = s.take().unwrap();
    assert_eq!(as_u32(&new), vec![100]);
    // Not handed out twice while in replay.
    assert!(s.take().unwrap().is_empty());
    s.ack(&old).unwrap();
    s.ack(&new).unwrap();
    assert_eq!(s.bytes(), 0);
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    fs::remove_dir_all(&dir).ok();
}

#[test]
fn torn_tail_is_skipped_and_counted() {
    let dir = tmp("torn");
    let mut s = Spool::open(&dir, 1 << 20).unwrap();
    for i in 0..10u8 {
        s.append("q", &[i; 20]).unwrap();
    }
    s.sync().unwrap();
    drop(s);
    let seg = fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    let full = fs::read(&seg).unwrap();
    // Cut the last record in half, as a kill -9 mid-write would.
    fs::write(&seg, &full[..full.len() - 10]).unwrap();
    let mut s = Spool::open(&dir, 1 << 20).unwrap();
    let r = s.take().unwrap();
    assert_eq!(r.records.len(), 9);
    assert_eq!(r.torn, (HEADER + 1 + 1 + 20 - 10) as u64);
    // A flipped byte inside a record ends the segment at that record.
    let mut bad = full.clone();
    bad[HEADER + 5] ^= 0xff;
    fs::write(&seg, &bad).unwrap();
    s.release(&r);
    let r = s.take().unwrap();
    assert_eq!(r.records.len(), 0);
    assert_eq!(r.torn, full.len() as u64);
    fs::remove_dir_all(&dir).ok();
}

#[test]
fn segments_are_cut_and_replayed_one_at_a_time() {
    let dir = tmp("cut");
    // Each record is 8 + 1 + 1 + 100 = 110 bytes: three per 300-byte segment.
    let mut s = Spool::open(&dir, 1 << 20).unwrap().with_segment_bytes(300);
    for i in 0..10u8 {
        s.append("q", &[i; 100]).unwrap();
    }
    let total = s.bytes();
    assert_eq!(total, 1100);
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 4);
    let first = s.take().unwrap();
    assert_eq!(first.records.len(), 3);
    assert_eq!(first.records[0].payload, vec![0; 100]);
    let second = s.take().unwrap();
    assert_eq!(second.records[0].payload, vec![3; 100]);
    // The first reached a broker, the second did not: only the second comes again.
    s.ack(&first).unwrap();
    s.release(&second);
    assert_eq!(s.bytes(), total - 330);
    let again = s.take().unwrap();
    assert_eq!(again.records, second.records);
    s.ack(&again).unwrap();
    let mut rest = 0;
    loop {
        let r = s.take().unwrap();
        if r.is_empty() {
            break;
        }
        rest += r.records.len();
        s.ack(&r).unwrap();
    }
    assert_eq!(rest, 4);
    assert_eq!(s.bytes(), 0);
    fs::remove_dir_all(&dir).ok();
}

#[test]
fn bounded() {
    let dir = tmp("full");
    let mut s = Spool::open(&dir, 100).unwrap();
    s.append("q", &[0; 50]).unwrap();
    assert!(matches!(
        s.append("q", &[0; 50]),
        Err(SpoolError::Full { max_bytes: 100, .. })
    ));
    assert!(matches!(
        s.append(&"q".repeat(256), b"x"),
        Err(SpoolError::TooLarge { .. })
    ));
    fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_segment_of_the_older_layout_still_reads() {
    // Bytes as the previous build wrote them: queue "massive", payload "ev".
    let dir = tmp("v1");
    fs::create_dir_all(&dir).unwrap();
    let body = [&[7u8][..], b"massive", b"ev"].concat();
    let mut rec = (body.len() as u32).to_le_bytes().to_vec();
    rec.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    rec.extend_from_slice(&body);
    fs::write(dir.join(segment_name(0)), &rec).unwrap();
    let mut s = Spool::open(&dir, 1 << 20).unwrap();
    let r = s.take().unwrap();
    assert_eq!(
        r.records,
        vec![Record {
            queue: "massive".into(),
            key: None,
            payload: b"ev".to_vec()
        }]
    );
    fs::remove_dir_all(&dir).ok();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]


    #[test]
    fn whatever_is_appended_comes_back(
        recs in proptest::collection::vec((
            "[a-z]{1,8}",
            proptest::option::of("[a-z0-9{}:]{0,12}"),
            proptest::collection::vec(any::<u8>(), 0..64),
        ), 0..50),
        cut in any::<prop::sample::Index>(),
    ) {
        // Keyed and older records mixed, as a spool written across an upgrade is.
        let dir = tmp("prop");
        let mut s = Spool::open(&dir, 1 << 20).unwrap();
        for (q, k, p) in &recs {
            match k {
                Some(k) => s.append_keyed(q, k, p).unwrap(),
                None => s.append(q, p).unwrap(),
            }
        }
        s.sync().unwrap();
        let r = s.take().unwrap();
        let want: Vec<Record> = recs
            .iter()
            .map(|(q, k, p)| Record { queue: q.clone(), key: k.clone(), payload: p.clone() })
            .collect();
        prop_assert_eq!(&r.records, &want);
        // Any truncation yields a prefix of the records, never garbage.
        if let Some(seg) = &r.segment {
            let data = fs::read(seg).unwrap();
            let at = cut.index(data.len() + 1);
            let mut out = Vec::new();
            fs::write(seg, &data[..at]).unwrap();
            let torn = read_segment(seg, &mut out).unwrap();
            prop_assert!(out.len() <= want.len());
            prop_assert_eq!(&out[..], &want[..out.len()]);
            prop_assert!(torn <= at as u64);
        }
        fs::remove_dir_all(&dir).ok();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proto::edits::cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// Arbitrary bytes as a segment: never a panic, and whatever is read is a
    /// well-formed record (the reader stops at the first torn or corrupt one).
    #[test]
    fn arbitrary_segment_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut out = Vec::new();
        let torn = parse_segment(&data, &mut out);
        prop_assert!(torn <= data.len() as u64);
        for r in &out {
            prop_assert!(r.queue.len() <= 255);
        }
    }

    /// Edits of a real segment (keyed and older records): never a panic, and the
    /// records read are a prefix-shaped run of well-formed ones.
    #[test]
    fn edited_segments_never_panic(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..8),
    ) {
        let mut data = Vec::new();
        for (i, key) in [Some("t1{0}"), None, Some("")].into_iter().enumerate() {
            let body = match key {
                Some(k) => [&[KEYED, 1u8][..], b"q", &(k.len() as u16).to_le_bytes(), k.as_bytes(), &[i as u8; 9]].concat(),
                None => [&[1u8][..], b"q", &[i as u8; 9]].concat(),
            };
            data.extend_from_slice(&(body.len() as u32).to_le_bytes());
            data.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
            data.extend_from_slice(&body);
        }
        let mut whole = Vec::new();
        prop_assert_eq!(parse_segment(&data, &mut whole), 0);
        prop_assert_eq!(whole.len(), 3);
        proto::edits::apply(&mut data, &edits);
        let mut out = Vec::new();
        let torn = parse_segment(&data, &mut out);
        prop_assert!(torn <= data.len() as u64);
    }
}
