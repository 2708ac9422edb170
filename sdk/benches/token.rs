//! Token mint (encode + seal + base64) against a bare AES-256-GCM seal of the same
//! plaintext, in the same run. Target: mint ≤ 1.5x the bare seal. Also the event
//! proof's sign and verify beside the event's own protobuf encoding.

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use criterion::{Criterion, criterion_group, criterion_main};
use prost::Message;
use proto::v1::RewardToken;
use sdk::token::{KeyRing, TokenCodec};
use std::hint::black_box;

fn token() -> RewardToken {
    RewardToken {
        trade_no: "cny2027:rain:3:100042".into(),
        user_id: "100042".into(),
        activity_id: "cny2027".into(),
        scene_id: "rain".into(),
        reward_type: "cash".into(),
        amount: 888,
        grant_time_ms: 1_800_000_000_000,
        description: "red envelope".into(),
        expires_at_ms: 1_800_604_800_000,
        app_id: "wallet".into(),
    }
}

fn bench(c: &mut Criterion) {
    let t = token();
    let codec = TokenCodec::new(KeyRing::random(1));
    let now = 1_800_000_000_000;
    let plaintext = t.encode_to_vec();
    let cipher = Aes256Gcm::new(&Key::<Aes256Gcm>::from(rand::random::<[u8; 32]>()));
    let mut g = c.benchmark_group("token");
    g.bench_function("bare_aes256gcm_seal", |b| {
        b.iter(|| {
            // Same work a seal needs at minimum: a fresh nonce, a copy, the cipher.
            let mut buf = plaintext.clone();
            let nonce = Nonce::from(rand::random::<[u8; 12]>());
            let tag = cipher
                .encrypt_inout_detached(&nonce, b"", buf.as_mut_slice().into())
                .map_err(|_| ())
                .unwrap_or_default();
            black_box((buf, tag))
        })
    });
    // Where a mint's time goes beyond the bare seal: the pieces on their own.
    g.bench_function("part_protobuf_encode", |b| {
        b.iter(|| black_box(black_box(&t).encode_to_vec()))
    });
    // What the mint does instead: no `encoded_len` pass, capacity from the strings.
    g.bench_function("part_protobuf_encode_raw", |b| {
        b.iter(|| {
            let mut buf = Vec::with_capacity(160);
            black_box(&t).encode_raw(&mut buf);
            black_box(buf)
        })
    });
    let sealed_len = 19 + plaintext.len() + 16;
    let sealed_bytes = vec![0x5au8; sealed_len];
    g.bench_function("part_base64_encode", |b| {
        b.iter(|| {
            black_box(base64::Engine::encode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                black_box(&sealed_bytes),
            ))
        })
    });
    g.bench_function("part_base64_simd_encode", |b| {
        b.iter(|| {
            black_box(base64_simd::URL_SAFE_NO_PAD.encode_to_string(black_box(&sealed_bytes)))
        })
    });
    // Format 2's binding AAD: two one-byte lengths, the user id and the activity id.
    let aad = [0x11u8; 1 + 6 + 1 + 7];
    g.bench_function("part_seal_with_binding_aad", |b| {
        b.iter(|| {
            let mut buf = plaintext.clone();
            let nonce = Nonce::from(rand::random::<[u8; 12]>());
            let tag = cipher
                .encrypt_inout_detached(&nonce, black_box(&aad), buf.as_mut_slice().into())
                .map_err(|_| ())
                .unwrap_or_default();
            black_box((buf, tag))
        })
    });
    g.bench_function("mint_encode_seal_base64", |b| {
        b.iter(|| black_box(codec.seal_at(black_box(&t), now)))
    });
    let sealed = codec.seal_at(&t, now).unwrap_or_default();
    g.bench_function("open", |b| {
        b.iter(|| black_box(codec.open(black_box(&sealed), "100042", "cny2027")))
    });
    g.finish();
    // The event proof the SDK adds to every event, and the service's check of it.
    let event = sdk::token::event_of(&t);
    let proofs = codec.proofs();
    let mut signed = event.clone();
    proofs.sign(&mut signed);
    let mut g = c.benchmark_group("event");
    g.bench_function("encode", |b| {
        b.iter(|| black_box(black_box(&event).encode_to_vec()))
    });
    g.bench_function("proof_sign", |b| {
        b.iter(|| black_box(proofs.proof(black_box(&event))))
    });
    g.bench_function("proof_verify", |b| {
        b.iter(|| black_box(proofs.verify(black_box(&signed))))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
