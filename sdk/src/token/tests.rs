use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use proptest::prelude::*;
use prost::Message as _;
use proto::v1::RewardToken;

use super::*;

const T0: i64 = 1_800_000_000_000;

fn token(user: &str) -> RewardToken {
    RewardToken {
        trade_no: format!("cny:rain:r1:{user}"),
        user_id: user.into(),
        activity_id: "cny".into(),
        scene_id: "rain".into(),
        reward_type: "cash".into(),
        amount: 888,
        grant_time_ms: T0,
        description: "8.88".into(),
        expires_at_ms: 0,
        app_id: "app".into(),
    }
}

fn raw(sealed: &str) -> Vec<u8> {
    URL_SAFE_NO_PAD.decode(sealed).unwrap()
}

fn enc(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

#[test]
fn opens_what_it_sealed_and_binds_user_and_activity() {
    let codec = TokenCodec::new(KeyRing::random(1));
    let sealed = codec.seal_at(&token("u1"), T0).unwrap();
    assert_eq!(codec.open(&sealed, "u1", "cny").unwrap(), token("u1"));
    assert_eq!(codec.open(&sealed, "u2", "cny"), Err(Illegal::Forged));
    assert_eq!(codec.open(&sealed, "u1", "other"), Err(Illegal::Forged));
    // Length-prefixed AAD: moving a character between the two fields changes it.
    let mut t = token("u1");
    t.activity_id = "xcny".into();
    let sealed = codec.seal_at(&t, T0).unwrap();
    assert_eq!(codec.open(&sealed, "u1x", "cny"), Err(Illegal::Forged));
}

#[test]
fn malformed_tokens_are_illegal_with_the_right_reason() {
    let codec = TokenCodec::new(KeyRing::random(1));
    let sealed = codec.seal_at(&token("u1"), T0).unwrap();
    let bytes = raw(&sealed);
    assert_eq!(codec.open("***", "u1", "cny"), Err(Illegal::BadBase64));
    assert_eq!(codec.open("", "u1", "cny"), Err(Illegal::Truncated));
    assert_eq!(
        codec.open(&enc(&bytes[..30]), "u1", "cny"),
        Err(Illegal::Truncated)
    );
    assert_eq!(
        codec.open(&enc(&bytes[..bytes.len() - 1]), "u1", "cny"),
        Err(Illegal::Forged)
    );
    let mut v = bytes.clone();
    v[0] = 3;
    assert_eq!(
        codec.open(&enc(&v), "u1", "cny"),
        Err(Illegal::BadVersion(3))
    );
    // A version 2 token relabelled as version 1 is opened with the header in its
    // AAD, which fails the tag.
    let mut v1 = bytes.clone();
    assert_eq!(v1[0], 2);
    v1[0] = 1;
    assert_eq!(codec.open(&enc(&v1), "u1", "cny"), Err(Illegal::Forged));
    let mut k = bytes.clone();
    k[1..3].copy_from_slice(&9u16.to_be_bytes());
    assert_eq!(
        codec.open(&enc(&k), "u1", "cny"),
        Err(Illegal::UnknownKey(9))
    );
    let mut p = bytes;
    p[6] ^= 1; // another minute: another subkey
    assert_eq!(codec.open(&enc(&p), "u1", "cny"), Err(Illegal::Forged));
}

#[test]
fn version_1_tokens_still_open_and_stay_bound() {
    let codec = TokenCodec::new(KeyRing::random(1));
    let old = codec.seal_v1_at(&token("u1"), T0).unwrap();
    assert_eq!(raw(&old)[0], 1);
    assert_eq!(codec.open(&old, "u1", "cny"), Ok(token("u1")));
    assert_eq!(codec.open(&old, "u2", "cny"), Err(Illegal::Forged));
    // Relabelled as version 2, its header leaves the AAD: the tag fails.
    let mut v2 = raw(&old);
    v2[0] = 2;
    assert_eq!(codec.open(&enc(&v2), "u1", "cny"), Err(Illegal::Forged));
    let new = codec.seal_at(&token("u1"), T0).unwrap();
    assert_eq!(raw(&new)[0], 2);
}

#[test]
fn tokens_sealed_before_a_rotation_still_open() {
    let old = KeyRing::random(1);
    let before = TokenCodec::new(old.clone())
        .seal_at(&token("u1"), T0)
        .unwrap();
    // Add key 2 and make it current: the text form is how rings travel between hosts.
    let text = format!(
        "{}2:{}\n",
        old.to_text().as_str(),
        URL_SAFE_NO_PAD.encode([7u8; 32])
    );
    let rotated = TokenCodec::new(KeyRing::parse(&text, None).unwrap());
    assert_eq!(rotated.ring().current_id(), 2);
    assert_eq!(rotated.open(&before, "u1", "cny").unwrap(), token("u1"));
    let after = rotated.seal_at(&token("u1"), T0).unwrap();
    assert_eq!(raw(&after)[1..3], 2u16.to_be_bytes());
    // The old ring does not know key 2.
    assert_eq!(
        TokenCodec::new(old).open(&after, "u1", "cny"),
        Err(Illegal::UnknownKey(2))
    );
}

#[test]
fn every_seal_uses_a_fresh_nonce_and_periods_change_subkeys() {
    let codec = TokenCodec::new(KeyRing::random(1));
    let a = raw(&codec.seal_at(&token("u1"), T0).unwrap());
    let b = raw(&codec.seal_at(&token("u1"), T0).unwrap());
    assert_ne!(a[7..19], b[7..19], "nonces repeat");
    assert_ne!(a, b);
    let later = raw(&codec.seal_at(&token("u1"), T0 + 60_000).unwrap());
    assert_eq!(
        u32::from_be_bytes(later[3..7].try_into().unwrap()),
        u32::from_be_bytes(a[3..7].try_into().unwrap()) + 1
    );
    assert!(codec.open(&enc(&later), "u1", "cny").is_ok());
}

#[test]
fn clock_before_epoch_is_refused() {
    let codec = TokenCodec::new(KeyRing::random(1));
    assert_eq!(
        codec.seal_at(&token("u1"), -1),
        Err(SealError::BadClock(-1))
    );
}

#[test]
fn bindings_too_long_for_the_stack_aad_still_seal_and_bind() {
    // 19-byte header + 8 + ids: past AAD_STACK, so the heap path builds the AAD.
    let long_user = "u".repeat(super::seal::AAD_STACK);
    let codec = TokenCodec::new(KeyRing::random(1));
    let sealed = codec.seal_at(&token(&long_user), T0).unwrap();
    assert_eq!(
        codec.open(&sealed, &long_user, "cny").unwrap(),
        token(&long_user)
    );
    let other = format!("{long_user}x");
    assert_eq!(codec.open(&sealed, &other, "cny"), Err(Illegal::Forged));
    // Ids of 128 bytes and more take a two-byte length in the AAD (the general
    // varint path beside the one-byte shortcut); each length binds its own token.
    for n in [127, 128, 200, 300] {
        let user = "v".repeat(n);
        let sealed = codec.seal_at(&token(&user), T0).unwrap();
        assert_eq!(
            codec.open(&sealed, &user, "cny").unwrap(),
            token(&user),
            "{n}"
        );
        let shorter = "v".repeat(n - 1);
        assert_eq!(codec.open(&sealed, &shorter, "cny"), Err(Illegal::Forged));
    }
}

#[test]
fn tokens_on_both_sides_of_the_stack_buffer_seal_and_open() {
    // The mint builds a token of up to SEAL_STACK sealed bytes on the stack and a
    // larger one on the heap; every size across the edge, and a very large one, must
    // seal to exactly header + encoding + tag and open to the same token.
    let codec = TokenCodec::new(KeyRing::random(1));
    let base = token("u1");
    for extra in (0..=300).chain([20_000]) {
        let t = RewardToken {
            description: "d".repeat(extra),
            ..base.clone()
        };
        let sealed = codec.seal_at(&t, T0).unwrap();
        assert_eq!(raw(&sealed).len(), 19 + t.encoded_len() + 16, "{extra}");
        assert_eq!(codec.open(&sealed, "u1", "cny").unwrap(), t, "{extra}");
    }
}

#[test]
fn simd_encoder_writes_what_the_strict_decoder_reads() {
    // Seal encodes with base64-simd, open decodes with the scalar engine: they must
    // agree on every length (each tail: 0, 1 or 2 leftover bytes).
    for len in 0..=300usize {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 151 + len) as u8).collect();
        let simd = base64_simd::URL_SAFE_NO_PAD.encode_to_string(&bytes);
        assert_eq!(simd, URL_SAFE_NO_PAD.encode(&bytes), "length {len}");
        assert_eq!(
            URL_SAFE_NO_PAD.decode(&simd).unwrap(),
            bytes,
            "length {len}"
        );
    }
}

proptest! {
    #[test]
    fn the_mint_encoder_writes_prosts_bytes(
        strings in prop::array::uniform7(".{0,200}"),
        ints in prop::array::uniform3(any::<i64>()),
        zero in prop::array::uniform10(any::<bool>()),
    ) {
        // Every field set (a new field left out of `encode_token` shows here), and any
        // of them at its default (left out of the encoding).
        let s = |i: usize, j: usize| if zero[j] { String::new() } else { strings[i].clone() };
        let n = |i: usize, j: usize| if zero[j] { 0 } else { ints[i] };
        let t = RewardToken {
            trade_no: s(0, 0), user_id: s(1, 1), activity_id: s(2, 2), scene_id: s(3, 3),
            reward_type: s(4, 4), amount: n(0, 5), grant_time_ms: n(1, 6),
            description: s(5, 7), expires_at_ms: n(2, 8), app_id: s(6, 9),
        };
        // The bound holds exactly what the encoder writes, at most.
        let mut mine = vec![0xAA; super::seal::encoded_bound(&t)];
        let mut w = super::seal::SliceWriter::new(&mut mine);
        super::seal::encode_token(&t, &mut w);
        let n = w.written().unwrap();
        let prost_bytes = t.encode_to_vec();
        prop_assert_eq!(&mine[..n], prost_bytes.as_slice());
        // Too small a buffer is told, not written past.
        let mut short = vec![0u8; n.saturating_sub(1)];
        let mut w = super::seal::SliceWriter::new(&mut short);
        super::seal::encode_token(&t, &mut w);
        prop_assert_eq!(w.written().is_none(), n > 0);
    }

    #[test]
    fn round_trips_any_token(
        trade_no in ".{0,64}", user in ".{1,32}", activity in ".{0,32}",
        amount in any::<i64>(), description in ".{0,80}", now in 0i64..4_000_000_000_000,
    ) {
        let codec = TokenCodec::new(KeyRing::random(2));
        let t = RewardToken { trade_no, user_id: user.clone(), activity_id: activity.clone(), amount, description, ..Default::default() };
        let sealed = codec.seal_at(&t, now).unwrap();
        prop_assert_eq!(codec.open(&sealed, &user, &activity).unwrap(), t);
    }

    #[test]
    fn any_flipped_bit_is_illegal(pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let codec = TokenCodec::new(KeyRing::random(1));
        let mut bytes = raw(&codec.seal_at(&token("u1"), T0).unwrap());
        let i = pos.index(bytes.len());
        bytes[i] ^= 1 << bit;
        prop_assert!(codec.open(&enc(&bytes), "u1", "cny").is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proto::edits::cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// Any text presented as a token: a typed refusal, never a panic.
    #[test]
    fn the_opener_takes_arbitrary_text(text in ".{0,400}", user in ".{0,12}") {
        let codec = TokenCodec::new(KeyRing::random(1));
        prop_assert!(codec.open(&text, &user, "cny").is_err());
    }

    /// Any bytes behind the token encoding, and any edits of a real token: refused,
    /// never a panic (the opener's length, version and key-id paths included).
    #[test]
    fn the_opener_takes_arbitrary_and_edited_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..600),
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let codec = TokenCodec::new(KeyRing::random(1));
        prop_assert!(codec.open(&enc(&bytes), "u1", "cny").is_err());
        let mut real = raw(&codec.seal_at(&token("u1"), T0).unwrap());
        proto::edits::apply(&mut real, &edits);
        // An edit can restore the original byte; the opened token is then the real one.
        if let Ok(t) = codec.open(&enc(&real), "u1", "cny") {
            prop_assert_eq!(t, token("u1"));
        }
    }
}
