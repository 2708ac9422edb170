//! Compound records (`proto::pack`): the wire format pinned byte for byte, old
//! single-event records read as one event, round trips, and arbitrary or edited bytes
//! into the reader (a typed error or events, never a panic).

use bytes::Bytes;
use proptest::prelude::*;
use prost::Message;
use proto::pack::{self, PackError};
use proto::v1::{RewardEvent, UserInfo};

/// Version 1, byte for byte. A change here breaks every consumer reading records
/// already in a broker's log: take a new version byte instead.
#[test]
fn version_1_encoding_is_pinned() {
    let raw = pack::encode(&[("t1", b"abc".as_slice()), ("k", b"".as_slice())]);
    assert_eq!(
        hex::encode(&raw),
        // magic 87 52 50, version 01, count 02,
        // key len 02 "t1" (7431), payload len 03 "abc" (616263),
        // key len 01 "k" (6b), payload len 00
        "8752500102027431036162630 16b00".replace(' ', "")
    );
    // A payload of 300 bytes takes a two-byte length (ac 02).
    let big = vec![7u8; 300];
    let raw = pack::encode(&[("", big.as_slice())]);
    assert_eq!(hex::encode(&raw[..8]), "8752500101 00ac02".replace(' ', ""));
    assert_eq!(raw.len(), 8 + 300);
}

#[test]
fn a_golden_pack_reads_back_its_events() {
    let raw = Bytes::from(hex::decode("87525001020274310361626301 6b00".replace(' ', "")).unwrap());
    let events = pack::unpack(raw).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].key_str(), "t1");
    assert_eq!(&events[0].payload[..], b"abc");
    assert_eq!(events[1].key_str(), "k");
    assert!(events[1].payload.is_empty());
}

fn event(n: u32) -> RewardEvent {
    RewardEvent {
        trade_no: format!("cny:rain:{n}:u{n}"),
        user: Some(UserInfo {
            user_id: format!("u{n}"),
            ..Default::default()
        }),
        activity_id: "cny".into(),
        scene_id: "rain".into(),
        reward_type: "cash".into(),
        amount: 888,
        ..Default::default()
    }
}

#[test]
fn an_old_single_event_record_reads_as_one_event() {
    let bytes = Bytes::from(event(1).encode_to_vec());
    assert!(!pack::is_pack(&bytes));
    let events = pack::unpack(bytes.clone()).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].key, None);
    assert_eq!(events[0].payload, bytes);
    assert_eq!(
        RewardEvent::decode(events[0].payload.as_ref()).unwrap(),
        event(1)
    );
}

#[test]
fn a_pack_is_never_taken_for_a_protobuf_event() {
    // The magic's first byte has wire type 7: no protobuf decoder accepts it, so a
    // reader that does not know packs fails loudly instead of misreading one.
    let raw = pack::encode(&[("t", event(1).encode_to_vec().as_slice())]);
    assert!(RewardEvent::decode(raw.as_slice()).is_err());
    assert!(proto::v1::DeadLetter::decode(raw.as_slice()).is_err());
}

#[test]
fn bad_packs_get_typed_errors() {
    let ok = pack::encode(&[("t1", b"abc".as_slice())]);
    // Every strict prefix of a valid pack (past the magic) is truncated.
    for cut in 3..ok.len() {
        let e = pack::unpack(Bytes::copy_from_slice(&ok[..cut])).unwrap_err();
        assert!(matches!(e, PackError::Truncated(_)), "cut {cut}: {e:?}");
    }
    let mut v2 = ok.clone();
    v2[3] = 2;
    assert_eq!(pack::unpack(Bytes::from(v2)), Err(PackError::Version(2)));
    let mut extra = ok.clone();
    extra.push(0);
    assert_eq!(
        pack::unpack(Bytes::from(extra)),
        Err(PackError::Trailing(1))
    );
    let empty = pack::encode(&[]);
    assert_eq!(pack::unpack(Bytes::from(empty)), Err(PackError::Count(0)));
    let long_key = "k".repeat(pack::MAX_KEY_BYTES + 1);
    let raw = pack::encode(&[(long_key.as_str(), b"x".as_slice())]);
    assert_eq!(
        pack::unpack(Bytes::from(raw)),
        Err(PackError::KeyTooLong(pack::MAX_KEY_BYTES as u64 + 1))
    );
    let mut bad_utf8 = pack::encode(&[("ab", b"x".as_slice())]);
    bad_utf8[6] = 0xff;
    assert_eq!(
        pack::unpack(Bytes::from(bad_utf8)),
        Err(PackError::KeyNotUtf8)
    );
    let mut huge = vec![0x87, b'R', b'P', 1];
    huge.extend_from_slice(&[0xff; 11]);
    assert!(matches!(
        pack::unpack(Bytes::from(huge)),
        Err(PackError::Varint(4))
    ));
    let mut too_many = vec![0x87, b'R', b'P', 1];
    too_many.extend_from_slice(&[0xe9, 0x07]); // 1 001
    assert_eq!(
        pack::unpack(Bytes::from(too_many)),
        Err(PackError::Count(1_001))
    );
    // A varint whose tenth byte carries more than the 64th bit overflows.
    let mut over = vec![0x87, b'R', b'P', 1];
    over.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]);
    assert_eq!(pack::unpack(Bytes::from(over)), Err(PackError::Varint(4)));
}

proptest! {
    // Round trips are about the layout, not about finding odd bytes: a tenth of the
    // arbitrary-input runs' cases.
    #![proptest_config(ProptestConfig { cases: (proto::edits::cases() / 10).max(100), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn packs_round_trip(
        events in proptest::collection::vec(("[a-z0-9:{}]{0,40}", proptest::collection::vec(any::<u8>(), 0..300)), 1..40),
    ) {
        let refs: Vec<(&str, &[u8])> = events.iter().map(|(k, p)| (k.as_str(), p.as_slice())).collect();
        let raw = pack::encode(&refs);
        prop_assert_eq!(raw.len(), pack::encoded_len(refs.iter().copied()));
        let back = pack::unpack(Bytes::from(raw)).unwrap();
        prop_assert_eq!(back.len(), events.len());
        for (b, (k, p)) in back.iter().zip(&events) {
            prop_assert_eq!(b.key_str(), k.as_str());
            prop_assert_eq!(&b.payload[..], p.as_slice());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proto::edits::cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_unpack_or_fail_cleanly(mut bytes in proptest::collection::vec(any::<u8>(), 0..512), as_pack in any::<bool>()) {
        if as_pack {
            bytes.splice(0..0, [0x87, b'R', b'P', 1]);
        }
        let len = bytes.len();
        if let Ok(events) = pack::unpack(Bytes::from(bytes)) {
            prop_assert!(!events.is_empty());
            let total: usize = events.iter().map(|e| e.payload.len()).sum();
            prop_assert!(total <= len);
            for e in &events {
                let _ = RewardEvent::decode(e.payload.as_ref());
            }
        }
    }

    #[test]
    fn edited_packs_unpack_or_fail_cleanly(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..8),
    ) {
        let a = event(1).encode_to_vec();
        let b = event(2).encode_to_vec();
        let mut raw = pack::encode(&[("cny:rain:1:u1", a.as_slice()), ("cny:rain:2:u2", b.as_slice())]);
        proto::edits::apply(&mut raw, &edits);
        if let Ok(events) = pack::unpack(Bytes::from(raw)) {
            for e in &events {
                if let Ok(ev) = RewardEvent::decode(e.payload.as_ref()) {
                    let _ = proto::ids::check_event(&ev);
                }
            }
        }
    }
}
