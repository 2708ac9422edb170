//! The conformance suite (`conformance/test_contract.py`, Python): a client written
//! from the `.proto` files and `docs/api.md` alone drives the real `reward-service`
//! binary through the contract (grants, repeats, conflicts, budgets over the admin
//! API, bad inputs and their documented errors, kill -9 mid-run with resends until
//! every request is final) and opens, in Python, tokens this build's SDK sealed.
//!
//! This test prepares what a deployment would (a config file, the credentials, the
//! stack's brokers and Redis) and runs the suite with the interpreter `ops/test`
//! makes (`REWARD_CONFORMANCE_PYTHON`, a virtualenv with conformance/requirements.txt).
//! Without it the test fails, never skips.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::{CREDENTIAL, WALLET_CREDENTIAL, create_topics, service_toml, unique_dir};
use proto::v1::RewardToken;
use sdk::token::{KeyRing, TokenCodec};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Tokens sealed by the SDK's codec under the service's own key ring, for the
/// suite to open: the ring, and each token with who it is presented as.
fn sealed_tokens(dir: &std::path::Path) -> serde_json::Value {
    let ring = KeyRing::from_file(&dir.join("keys"), None).unwrap();
    let text = ring.to_text();
    let keys: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(id, b64)| {
            use base64::Engine;
            let key = base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .unwrap();
            serde_json::json!({"id": id.parse::<u16>().unwrap(), "key_hex": hex::encode(key)})
        })
        .collect();
    let codec = TokenCodec::new(ring);
    let tokens: Vec<serde_json::Value> = (0..20)
        .map(|i| {
            let t = RewardToken {
                trade_no: format!("conf:tok:{i}"),
                user_id: format!("u{i}"),
                activity_id: "cny".into(),
                scene_id: "rain".into(),
                reward_type: if i % 2 == 0 { "cash" } else { "coin" }.into(),
                amount: 100 + i,
                grant_time_ms: reward_runtime::clock::now_ms(),
                description: format!("红包 {i}"),
                expires_at_ms: if i % 3 == 0 { 0 } else { 1_900_000_000_000 },
                app_id: if i % 4 == 0 {
                    String::new()
                } else {
                    "app".into()
                },
            };
            serde_json::json!({
                "sealed": codec.seal(&t).unwrap(),
                "user_id": t.user_id,
                "activity_id": t.activity_id,
                "token": {
                    "trade_no": t.trade_no, "user_id": t.user_id, "activity_id": t.activity_id,
                    "scene_id": t.scene_id, "reward_type": t.reward_type, "amount": t.amount,
                    "grant_time_ms": t.grant_time_ms, "description": t.description,
                    "expires_at_ms": t.expires_at_ms, "app_id": t.app_id,
                },
            })
        })
        .collect();
    serde_json::json!({"ring": keys, "tokens": tokens})
}

#[test]
fn the_python_conformance_suite_passes_against_the_real_service() {
    let python = std::env::var("REWARD_CONFORMANCE_PYTHON").unwrap_or_else(|_| {
        panic!(
            "REWARD_CONFORMANCE_PYTHON is not set: run the stack tier through ops/test, which \
             makes the suite's virtualenv (conformance/requirements.txt), or point it at a \
             python with those packages"
        )
    });
    let tag = format!("c{:08x}", rand::random::<u32>());
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(create_topics(&tag));
    let dir = unique_dir(&tag);
    let port = free_port();
    let text = service_toml(&tag, &dir, 1_000_000, "").replacen(
        "grpc_addr = \"127.0.0.1:0\"",
        &format!("grpc_addr = \"127.0.0.1:{port}\""),
        1,
    );
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    let config = dir.join("service.toml");
    std::fs::write(&config, text).unwrap();
    let tokens = dir.join("sdk-tokens.json");
    std::fs::write(&tokens, sealed_tokens(&dir).to_string()).unwrap();
    let repo = reward_testkit::repo();
    let out = Command::new(python)
        .current_dir(&repo)
        .args([
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            "conformance",
        ])
        .env(
            "REWARD_SERVICE_BIN",
            common::workspace_bin("reward-service"),
        )
        .env("REWARD_SERVICE_CONFIG", &config)
        .env("REWARD_SERVICE_TOKEN", CREDENTIAL)
        .env("REWARD_WALLET_TOKEN", WALLET_CREDENTIAL)
        .env("REWARD_ADMIN_TOKEN", reward_testkit::ADMIN_CREDENTIAL)
        .env("CONFORMANCE_GRPC_ADDR", format!("127.0.0.1:{port}"))
        .env("CONFORMANCE_SDK_TOKENS", &tokens)
        .env("CONFORMANCE_WORK_DIR", &dir)
        .env("CONFORMANCE_TAG", &tag)
        .output()
        .unwrap();
    let report = format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{report}");
    assert!(
        out.status.success(),
        "the conformance suite failed:\n{report}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(" passed"),
        "{report}"
    );
    // The kill -9 test's users hold exactly what was sent to them: one credit per
    // reward in the ledger, whatever was resent.
    let want: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("kill-ledger.json")).unwrap()).unwrap();
    let balances = want["balances"].as_object().unwrap();
    assert_eq!(balances.len(), 50);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let ledger = reward_service::downstream::Ledger::connect(
            &common::redis_url(),
            &format!("ledger-{tag}"),
            &std::collections::HashMap::new(),
        )
        .await
        .unwrap();
        for (user, total) in balances {
            assert_eq!(
                ledger.balance(user, "cash").await.unwrap(),
                total.as_i64().unwrap(),
                "user {user}"
            );
        }
    });
    let _ = std::fs::remove_dir_all(dir);
}
