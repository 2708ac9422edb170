//! Token mint (encode + seal + base64) against a bare AES-256-GCM seal of the same
//! plaintext, in the same run. Target: mint ≤ 1.5x the bare seal.

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
    g.bench_function("mint_encode_seal_base64", |b| {
        b.iter(|| black_box(codec.seal_at(black_box(&t), now)))
    });
    let sealed = codec.seal_at(&t, now).unwrap_or_default();
    g.bench_function("open", |b| {
        b.iter(|| black_box(codec.open(black_box(&sealed), "100042", "cny2027")))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
