//! Both APIs of a running service (real Redis, Kafka and RocketMQ from `ops/stack up`):
//! the wallet endpoints' legal / unknown / illegal cases and withdrawal, gRPC grants
//! (sync, async, batch), bad inputs over both, the failure archive and topic, graceful
//! shutdown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{CREDENTIAL, WALLET_CREDENTIAL, create_topics, service_config, tampered, unique_dir};
use proto::v1::reward_service_client::RewardServiceClient;
use proto::v1::{
    GrantAsyncRequest, GrantBatchRequest, GrantOutcome, GrantRequest, RewardEvent, RewardToken,
};
use reward_service::downstream::Ledger;
use reward_service::server::{Running, start};
use reward_testkit::event;
use sdk::request::{RedEnvelopeRain, User};
use serde_json::{Value, json};
use tonic::transport::Channel;

async fn running(tag: &str, budget: i64) -> (Running, std::path::PathBuf) {
    create_topics(tag).await;
    let dir = unique_dir(tag);
    let cfg = service_config(tag, &dir, budget, "");
    (start(&cfg).await.unwrap(), dir)
}

/// What the test scene `cny/rain` has spent.
async fn spent(r: &Running) -> i64 {
    r.service()
        .granter()
        .claims()
        .spent("cny/rain")
        .await
        .unwrap()
}

/// The ledger of `service_config(tag, ..)`, to read balances.
async fn ledger(tag: &str) -> Ledger {
    Ledger::connect(
        &common::redis_url(),
        &format!("ledger-{tag}"),
        &HashMap::new(),
    )
    .await
    .unwrap()
}

fn http(r: &Running, path: &str) -> String {
    format!("http://{}{path}", r.http_addr)
}

async fn post(r: &Running, path: &str, body: &Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(http(r, path))
        .bearer_auth(WALLET_CREDENTIAL)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn get(r: &Running, path: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .get(http(r, path))
        .bearer_auth(WALLET_CREDENTIAL)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn validities(v: &Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["validity"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wallet_validates_lists_and_withdraws_only_legal_uncredited_tokens() {
    let tag = format!("w{:08x}", rand::random::<u32>());
    let (r, dir) = running(&tag, 1_000_000).await;
    let sdk = r.service().sdk().clone();
    let rain = RedEnvelopeRain::new("cny", "cash");
    let coins = RedEnvelopeRain::new("cny", "coin");
    let alice = User::new("1001");
    let bob = User::new("1002");
    let a1 = sdk.send_reward(rain.grab(&alice, 1, 100)).await.unwrap();
    let a2 = sdk.send_reward(rain.grab(&alice, 2, 200)).await.unwrap();
    let a3 = sdk.send_reward(coins.grab(&alice, 3, 5)).await.unwrap();
    let b1 = sdk.send_reward(rain.grab(&bob, 1, 300)).await.unwrap();
    // Direct writes (the default): each call answered once a store held its reward,
    // Redis (its token) or, Redis slower than 20 ms, a broker (its event; the token
    // write goes on). The flush waits for the token writes still going on.
    assert!(
        [&a1, &a2, &a3, &b1]
            .iter()
            .all(|t| t.held_by != sdk::HeldBy::Nothing),
        "{:?}",
        [&a1, &a2, &a3, &b1]
    );
    assert_eq!(
        sdk.store().flush(std::time::Duration::from_secs(30)).await,
        0
    );
    // Opens (sealed with the service's own keys) but was never stored or granted.
    let stray = sdk
        .codec()
        .seal(&RewardToken {
            trade_no: "cny:rain:9:1001".into(),
            user_id: "1001".into(),
            activity_id: "cny".into(),
            scene_id: "rain".into(),
            reward_type: "cash".into(),
            amount: 999,
            ..Default::default()
        })
        .unwrap();

    let (status, v) = post(
        &r,
        "/v1/tokens/validate",
        &json!({"user_id": "1001", "activity_id": "cny", "tokens": [
            a1.token, a2.token, b1.token, "not base64 !", tampered(&a1.token), stray,
            &a1.token[..a1.token.len() - 4]
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        validities(&v, "results"),
        [
            "legal", "legal", "illegal", "illegal", "illegal", "unknown", "illegal"
        ]
    );
    assert_eq!(v["results"][0]["credited"], false);
    assert_eq!(v["results"][0]["token"]["amount"], 100);
    assert_eq!(v["results"][5]["token"]["trade_no"], "cny:rain:9:1001");
    // Another activity: the binding does not match, so even alice's token is illegal.
    let (_, v) = post(
        &r,
        "/v1/tokens/validate",
        &json!({"user_id": "1001", "activity_id": "other", "tokens": [a1.token]}),
    )
    .await;
    assert_eq!(validities(&v, "results"), ["illegal"]);

    let (status, page) = get(&r, "/v1/users/1001/rewards?activity_id=cny").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["pending"].as_array().unwrap().len(), 3);
    assert_eq!(page["credited"].as_array().unwrap().len(), 0);
    assert_eq!(page["balance"]["cash"]["pending"], 300);
    assert_eq!(page["balance"]["coin"]["pending"], 5);

    let withdraw_body = json!({"user_id": "1001", "activity_id": "cny", "tokens": [
        a1.token, a2.token, a3.token, b1.token, stray, "garbage", a1.token
    ]});
    let (status, w) = post(&r, "/v1/withdraw", &withdraw_body).await;
    assert_eq!(status, 200, "{w}");
    assert_eq!(
        validities(&w, "items"),
        [
            "legal", "legal", "legal", "illegal", "unknown", "illegal", "legal"
        ]
    );
    let outcomes: Vec<Value> = w["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["result"]["outcome"].clone())
        .collect();
    assert_eq!(
        outcomes,
        [
            json!("granted"),
            json!("granted"),
            json!("granted"),
            Value::Null,
            Value::Null,
            Value::Null,
            // The same token twice in one request: credited once.
            json!("duplicate"),
        ]
    );
    assert_eq!(w["credited_now_amount"], 305);

    let ledger = ledger(&tag).await;
    assert_eq!(ledger.balance("1001", "cash").await.unwrap(), 300);
    assert_eq!(ledger.balance("1001", "coin").await.unwrap(), 5);
    assert_eq!(ledger.balance("1002", "cash").await.unwrap(), 0);

    // A second withdrawal credits nothing new.
    let (_, w2) = post(&r, "/v1/withdraw", &withdraw_body).await;
    assert_eq!(w2["credited_now_amount"], 0);
    assert_eq!(w2["items"][0]["result"]["outcome"], "duplicate");
    assert_eq!(ledger.balance("1001", "cash").await.unwrap(), 300);

    // Credited tokens left the pending hash; the page shows them as credited.
    let (_, page) = post(
        &r,
        "/v1/users/1001/rewards",
        &json!({"activity_id": "cny", "tokens": [stray, "junk"]}),
    )
    .await;
    assert_eq!(page["pending"].as_array().unwrap().len(), 0, "{page}");
    assert_eq!(page["credited"].as_array().unwrap().len(), 3);
    assert_eq!(page["unknown"].as_array().unwrap().len(), 1);
    assert_eq!(page["illegal"], 1);
    assert_eq!(page["balance"]["cash"]["credited"], 300);
    assert_eq!(page["balance"]["cash"]["total"], 300);
    let held = r.service().sdk().store().list("1001", "cny").await.unwrap();
    assert!(held.is_empty(), "{held:?}");
    let (_, v) = post(
        &r,
        "/v1/tokens/validate",
        &json!({"user_id": "1001", "activity_id": "cny", "tokens": [a1.token]}),
    )
    .await;
    assert_eq!(v["results"][0]["validity"], "legal");
    assert_eq!(v["results"][0]["credited"], true);

    let report = r.shutdown().await;
    assert!(report.drained);
    assert_eq!(report.left, 0);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_http_inputs_get_their_documented_errors() {
    let tag = format!("h{:08x}", rand::random::<u32>());
    let (r, dir) = running(&tag, 1_000).await;
    let client = reqwest::Client::new();
    let url = http(&r, "/v1/tokens/validate");
    let body = json!({"user_id": "1", "activity_id": "cny", "tokens": []});

    let resp = client.post(&url).json(&body).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"], "unauthorized");
    let resp = client
        .post(&url)
        .bearer_auth("test-credential-0123456780")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    let resp = client
        .post(&url)
        .header("authorization", WALLET_CREDENTIAL)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        401,
        "a credential without the Bearer scheme"
    );

    let send_raw = |text: &'static str| {
        client
            .post(&url)
            .bearer_auth(WALLET_CREDENTIAL)
            .header("content-type", "application/json")
            .body(text)
            .send()
    };
    for text in [
        "{not json",
        "[]",
        r#"{"user_id": "1", "tokens": []}"#,
        r#"{"user_id": 1, "activity_id": "a", "tokens": []}"#,
        r#"{"user_id": "", "activity_id": "a", "tokens": []}"#,
        // Ids the service cannot key (the one id rule, as the SDK applies it).
        r#"{"user_id": "{u1}", "activity_id": "a", "tokens": []}"#,
        r#"{"user_id": "1", "activity_id": "a/b", "tokens": []}"#,
        r#"{"user_id": "1", "activity_id": "a", "tokens": [], "extra": 1}"#,
    ] {
        let resp = send_raw(text).await.unwrap();
        assert_eq!(resp.status().as_u16(), 400, "{text}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"], "bad_request", "{text}");
        assert!(!v["reason"].as_str().unwrap().is_empty());
    }
    let resp = client
        .post(&url)
        .bearer_auth(WALLET_CREDENTIAL)
        .body(r#"{"user_id": "1", "activity_id": "a", "tokens": []}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400, "no JSON content type");

    let eleven: Vec<String> = (0..11).map(|i| format!("t{i}")).collect();
    let (status, v) = post(
        &r,
        "/v1/withdraw",
        &json!({"user_id": "1", "activity_id": "cny", "tokens": eleven}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(v["reason"].as_str().unwrap().contains("at most 10"), "{v}");

    let huge = "x".repeat(20_000);
    let (status, v) = post(
        &r,
        "/v1/tokens/validate",
        &json!({"user_id": "1", "activity_id": "cny", "tokens": [huge]}),
    )
    .await;
    assert_eq!(status, 413, "{v}");
    assert_eq!(v["error"], "too_large");

    let (status, v) = get(&r, "/v1/users/1/rewards").await;
    assert_eq!(status, 400, "missing activity_id: {v}");

    let health = client.get(http(&r, "/healthz")).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let ready = client.get(http(&r, "/readyz")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200);

    assert_eq!(r.shutdown().await.left, 0);
    let _ = std::fs::remove_dir_all(dir);
}

fn authed<T>(msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {CREDENTIAL}").parse().unwrap(),
    );
    req
}

async fn client(r: &Running) -> RewardServiceClient<Channel> {
    RewardServiceClient::connect(format!("http://{}", r.grpc_addr))
        .await
        .unwrap()
}

fn outcome_of(r: &proto::v1::GrantResult) -> GrantOutcome {
    GrantOutcome::try_from(r.outcome).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_grants_sync_async_and_batch() {
    let tag = format!("g{:08x}", rand::random::<u32>());
    create_topics(&tag).await;
    let dir = unique_dir(&tag);
    // Gems credit through a downstream that refuses every account for good.
    let closed = closed_downstream().await;
    let extra =
        format!("[downstreams.gem]\nkind = \"http\"\nurl = \"{closed}\"\ntimeout_ms = 5000\n");
    let r = start(&service_config(&tag, &dir, 10_000, &extra))
        .await
        .unwrap();
    let mut c = client(&r).await;

    // No credential, a wrong one.
    let e = c
        .grant(GrantRequest {
            event: Some(event("g:1", "7", "cash", 10)),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    let mut bad = tonic::Request::new(GrantRequest::default());
    bad.metadata_mut().insert(
        "authorization",
        "Bearer nope-nope-nope-nope".parse().unwrap(),
    );
    assert_eq!(
        c.grant(bad).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    // A request without an event.
    let e = c.grant(authed(GrantRequest::default())).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);

    let grant = |ev: RewardEvent| authed(GrantRequest { event: Some(ev) });
    let res = |resp: tonic::Response<proto::v1::GrantResponse>| resp.into_inner().result.unwrap();
    let g1 = res(c.grant(grant(event("g:1", "7", "cash", 10))).await.unwrap());
    assert_eq!(outcome_of(&g1), GrantOutcome::Granted, "{g1:?}");
    assert!(!g1.downstream_ref.is_empty());
    let again = res(c.grant(grant(event("g:1", "7", "cash", 10))).await.unwrap());
    assert_eq!(outcome_of(&again), GrantOutcome::Duplicate);
    assert_eq!(again.downstream_ref, g1.downstream_ref);
    let other = res(c.grant(grant(event("g:1", "7", "cash", 11))).await.unwrap());
    assert_eq!(outcome_of(&other), GrantOutcome::Conflict);
    assert_eq!(other.error_code, "CONFLICT");
    let invalid = res(c.grant(grant(event("g:2", "7", "cash", 0))).await.unwrap());
    assert_eq!(outcome_of(&invalid), GrantOutcome::Invalid);
    let invalid = res(c.grant(grant(event("g:2", "", "cash", 5))).await.unwrap());
    assert_eq!(outcome_of(&invalid), GrantOutcome::Invalid);
    let over = res(c
        .grant(grant(event("g:3", "7", "cash", 20_000)))
        .await
        .unwrap());
    assert_eq!(outcome_of(&over), GrantOutcome::BudgetExhausted);
    let mut no_budget = event("g:4", "7", "cash", 5);
    no_budget.scene_id = "fireworks".into();
    let nb = res(c.grant(grant(no_budget)).await.unwrap());
    assert_eq!(
        (outcome_of(&nb), nb.error_code.as_str()),
        (GrantOutcome::BudgetExhausted, "NO_BUDGET")
    );

    // A type with no downstream is refused before any claim: nothing recorded, nothing
    // archived, so the corrected request with the same trade number is credited.
    let ruby = res(c.grant(grant(event("g:5", "7", "ruby", 5))).await.unwrap());
    assert_eq!(outcome_of(&ruby), GrantOutcome::Invalid, "{ruby:?}");
    assert_eq!(ruby.error_code, "UNKNOWN_REWARD_TYPE");
    assert!(ruby.message.contains("\"ruby\""), "{ruby:?}");
    let fixed = res(c.grant(grant(event("g:5", "7", "cash", 5))).await.unwrap());
    assert_eq!(outcome_of(&fixed), GrantOutcome::Granted, "{fixed:?}");
    let again = res(c.grant(grant(event("g:5", "7", "ruby", 5))).await.unwrap());
    assert_eq!(
        outcome_of(&again),
        GrantOutcome::Conflict,
        "the trade number is now taken by the credited request: {again:?}"
    );

    // A downstream's permanent refusal fails for good: refunded, archived once and
    // sent to the failure topic.
    let gem = res(c.grant(grant(event("g:7", "7", "gem", 5))).await.unwrap());
    assert_eq!(outcome_of(&gem), GrantOutcome::FailedPermanent, "{gem:?}");
    assert_eq!(gem.error_code, "ACCOUNT_CLOSED");
    let archive = std::fs::read_to_string(dir.join("failures.jsonl")).unwrap();
    assert_eq!(archive.lines().count(), 1);
    assert!(archive.contains("\"g:7\""), "{archive}");
    let again = res(c.grant(grant(event("g:7", "7", "gem", 5))).await.unwrap());
    assert_eq!(outcome_of(&again), GrantOutcome::FailedPermanent);
    assert_eq!(
        std::fs::read_to_string(dir.join("failures.jsonl"))
            .unwrap()
            .lines()
            .count(),
        1,
        "a failure is recorded once"
    );

    // Async: budget now, credit when the batch (the consumer's call) comes.
    let a = c
        .grant_async(authed(GrantAsyncRequest {
            event: Some(event("g:6", "8", "cash", 40)),
        }))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(outcome_of(&a), GrantOutcome::Accepted, "{a:?}");
    assert_eq!(spent(&r).await, 55);

    let mut batch: Vec<RewardEvent> = (0..60)
        .map(|i| event(&format!("b:{i}"), &format!("{}", 100 + i % 7), "coin", 1))
        .collect();
    batch.insert(10, event("g:6", "8", "cash", 40));
    batch.insert(20, event("g:1", "7", "cash", 10));
    batch.insert(30, event("g:1", "7", "cash", 12));
    batch.insert(40, event("bad", "8", "cash", -1));
    let n = batch.len();
    let results = c
        .grant_batch(authed(GrantBatchRequest {
            events: batch.clone(),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(results.len(), n);
    for (ev, res) in batch.iter().zip(&results) {
        assert_eq!(ev.trade_no, res.trade_no, "results in request order");
    }
    assert_eq!(
        outcome_of(&results[10]),
        GrantOutcome::Granted,
        "the async grant, taken over"
    );
    assert_eq!(outcome_of(&results[20]), GrantOutcome::Duplicate);
    assert_eq!(outcome_of(&results[30]), GrantOutcome::Conflict);
    assert_eq!(outcome_of(&results[40]), GrantOutcome::Invalid);
    let granted = results
        .iter()
        .filter(|r| outcome_of(r) == GrantOutcome::Granted)
        .count();
    assert_eq!(granted, 61);
    // 10 + 5 + 40 + 60 coins; the refused and failed ones cost nothing.
    assert_eq!(spent(&r).await, 115);

    let too_many = GrantBatchRequest {
        events: (0..101)
            .map(|i| event(&format!("x:{i}"), "1", "coin", 1))
            .collect(),
        ..Default::default()
    };
    let e = c.grant_batch(authed(too_many)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);

    let ledger = ledger(&tag).await;
    assert_eq!(
        ledger.balance("7", "cash").await.unwrap(),
        15,
        "g:1 and the corrected g:5"
    );
    assert_eq!(ledger.balance("8", "cash").await.unwrap(), 40);

    let report = r.shutdown().await;
    assert!(report.drained);
    assert_eq!(report.left, 0);
    // The async grant's event and the failure record reached Kafka.
    let (_, kafka, _) = common::stack();
    let events = tokio::task::spawn_blocking({
        let (kafka, tag) = (kafka.clone(), tag.clone());
        move || {
            reward_testkit::readback::read_kafka(
                &kafka,
                &format!("massive-{tag}"),
                1,
                Duration::from_secs(5),
            )
        }
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(events.seen.get("g:6"), Some(&1), "{:?}", events.seen);
    let failures = tokio::task::spawn_blocking(move || {
        reward_testkit::readback::read_kafka(
            &kafka,
            &format!("failures-{tag}"),
            1,
            Duration::from_secs(5),
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(failures.messages, 1);
    let _ = std::fs::remove_dir_all(dir);
}

/// A downstream that answers after `delay`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_over_a_limit_or_without_a_proof_are_refused_before_any_claim() {
    let tag = format!("z{:08x}", rand::random::<u32>());
    let (r, dir) = running(&tag, 10_000).await;
    let mut c = client(&r).await;
    let proofs = r.service().sdk().codec().proofs();

    // A 3 MiB description: the whole call is INVALID_ARGUMENT, on all three APIs.
    let huge = RewardEvent {
        description: "d".repeat(3 << 20),
        ..event("z:huge", "7", "cash", 1)
    };
    let e = c
        .grant(authed(GrantRequest {
            event: Some(huge.clone()),
        }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let e = c
        .grant_async(authed(GrantAsyncRequest {
            event: Some(huge.clone()),
        }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let e = c
        .grant_batch(authed(GrantBatchRequest {
            events: vec![event("z:ok", "7", "cash", 1), huge],
            require_proof: false,
        }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("event 1"), "{e:?}");
    // Fields over the SDK's limits (one set, `proto::limits`) are INVALID per event.
    let res = |resp: tonic::Response<proto::v1::GrantResponse>| resp.into_inner().result.unwrap();
    for (what, ev) in [
        (
            "description",
            RewardEvent {
                description: "d".repeat(5_000),
                ..event("z:long", "7", "cash", 1)
            },
        ),
        ("trade_no", event(&"t".repeat(201), "7", "cash", 1)),
        ("user.user_id", event("z:user", &"u".repeat(65), "cash", 1)),
    ] {
        let got = res(c
            .grant(authed(GrantRequest { event: Some(ev) }))
            .await
            .unwrap());
        assert_eq!(outcome_of(&got), GrantOutcome::Invalid, "{what}: {got:?}");
        assert!(got.message.starts_with(what), "{what}: {got:?}");
    }

    // Events read off a topic must prove themselves.
    let now = reward_runtime::clock::now_ms();
    let signed = |mut e: RewardEvent| {
        e.expires_at_ms = now + 3_600_000;
        proofs.sign(&mut e);
        e
    };
    let good = signed(event("z:good", "7", "cash", 10));
    let unsigned = event("z:unsigned", "7", "cash", 777);
    let mut raised = signed(event("z:raised", "7", "cash", 10));
    raised.amount = 10_000;
    let mut moved = good.clone();
    moved.trade_no = "z:moved".into();
    let mut foreign = event("z:foreign", "7", "cash", 10);
    sdk::token::proof::EventProofs::new(&sdk::token::KeyRing::random(9)).sign(&mut foreign);
    let mut stale = event("z:stale", "7", "cash", 10);
    stale.expires_at_ms = now - 1;
    proofs.sign(&mut stale);
    let batch = vec![good.clone(), unsigned, raised, moved, foreign, stale];
    let results = c
        .grant_batch(authed(GrantBatchRequest {
            events: batch,
            require_proof: true,
        }))
        .await
        .unwrap()
        .into_inner()
        .results;
    let got: Vec<(&str, GrantOutcome, &str)> = results
        .iter()
        .map(|r| (r.trade_no.as_str(), outcome_of(r), r.error_code.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("z:good", GrantOutcome::Granted, ""),
            ("z:unsigned", GrantOutcome::Invalid, "PROOF_MISSING"),
            ("z:raised", GrantOutcome::Invalid, "PROOF_FORGED"),
            ("z:moved", GrantOutcome::Invalid, "PROOF_FORGED"),
            ("z:foreign", GrantOutcome::Invalid, "PROOF_UNKNOWN_KEY"),
            ("z:stale", GrantOutcome::Invalid, "EXPIRED"),
        ]
    );
    assert_eq!(spent(&r).await, 10, "only the proven event took budget");
    for t in ["z:unsigned", "z:raised", "z:moved", "z:foreign", "z:stale"] {
        assert!(
            r.service()
                .granter()
                .claims()
                .record(t)
                .await
                .unwrap()
                .is_none(),
            "{t} left a record"
        );
    }
    assert_eq!(ledger(&tag).await.balance("7", "cash").await.unwrap(), 10);

    // GrantAsync puts a signed event on the topic, which a consumer's call then takes.
    let a = c
        .grant_async(authed(GrantAsyncRequest {
            event: Some(event("z:async", "8", "cash", 5)),
        }))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(outcome_of(&a), GrantOutcome::Accepted, "{a:?}");
    let kafka = reward_testkit::stack().kafka_brokers;
    let topic = format!("massive-{tag}");
    let queued = reward_testkit::eventually(
        Duration::from_secs(150),
        "the async event on its topic",
        async || {
            let (k, t) = (kafka.clone(), topic.clone());
            let rb = tokio::task::spawn_blocking(move || {
                reward_testkit::readback::read_kafka(&k, &t, usize::MAX, Duration::from_secs(5))
            })
            .await
            .unwrap()
            .unwrap();
            rb.payloads
                .iter()
                .filter_map(|p| <RewardEvent as prost::Message>::decode(p.as_slice()).ok())
                .find(|e| e.trade_no == "z:async")
        },
    )
    .await;
    assert!(proofs.verify(&queued).is_ok(), "{queued:?}");
    let taken = c
        .grant_batch(authed(GrantBatchRequest {
            events: vec![queued],
            require_proof: true,
        }))
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(outcome_of(&taken[0]), GrantOutcome::Granted, "{taken:?}");
    assert_eq!(spent(&r).await, 15);

    // Claimed while valid, delivered after its expiry: finished, not stranded with its
    // budget held (nothing new is started past expiry, but a claim is completed).
    let soon = reward_runtime::clock::now_ms() + 1_500;
    let late = RewardEvent {
        expires_at_ms: soon,
        ..event("z:late", "8", "cash", 2)
    };
    let a = c
        .grant_async(authed(GrantAsyncRequest {
            event: Some(late.clone()),
        }))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(outcome_of(&a), GrantOutcome::Accepted, "{a:?}");
    // Time is the subject: the event's expiry must pass.
    while reward_runtime::clock::now_ms() <= soon {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = c
        .grant_batch(authed(GrantBatchRequest {
            events: vec![
                {
                    let mut l = late.clone();
                    proofs.sign(&mut l);
                    l
                },
                {
                    let mut never = late.clone();
                    never.trade_no = "z:never".into();
                    never.expires_at_ms = soon;
                    proofs.sign(&mut never);
                    never
                },
            ],
            require_proof: true,
        }))
        .await
        .unwrap()
        .into_inner()
        .results;
    let got: Vec<(GrantOutcome, &str)> = after
        .iter()
        .map(|r| (outcome_of(r), r.error_code.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (GrantOutcome::Granted, ""),
            (GrantOutcome::Invalid, "EXPIRED")
        ]
    );
    assert_eq!(spent(&r).await, 17);
    // A trade number of the full 200 bytes goes all the way through.
    let long = signed(event(&"t".repeat(200), "9", "cash", 1));
    let got = c
        .grant_batch(authed(GrantBatchRequest {
            events: vec![long],
            require_proof: true,
        }))
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(outcome_of(&got[0]), GrantOutcome::Granted, "{got:?}");
    r.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accept_window_credits_unproven_events_until_it_ends_then_refuses_them() {
    let tag = format!("w{:08x}", rand::random::<u32>());
    create_topics(&tag).await;
    let dir = unique_dir(&tag);
    // A window of 60 s from now (whole seconds: the config's UTC form): longer than a
    // service takes to start beside the other tests on a busy 2-core machine.
    let until_ms = reward_runtime::clock::now_ms() / 1000 * 1000 + 60_000;
    let until = reward_runtime::clock::format_utc(until_ms);
    let cfg = service_config(
        &tag,
        &dir,
        10_000,
        &format!("[events]\nunproven = \"accept\"\naccept_unproven_until = \"{until}\"\n"),
    );
    let r = start(&cfg).await.unwrap();
    let left_ms = until_ms - reward_runtime::clock::now_ms();
    assert!(
        left_ms > 5_000,
        "the service took until {left_ms} ms before the window's end to start: no time to test inside it"
    );
    let mut c = client(&r).await;
    let batch = |events: Vec<RewardEvent>| {
        authed(GrantBatchRequest {
            events,
            require_proof: true,
        })
    };
    let mut forged = event("w:forged", "7", "cash", 3);
    sdk::token::proof::EventProofs::new(&sdk::token::KeyRing::random(1)).sign(&mut forged);
    let first = c
        .grant_batch(batch(vec![event("w:old", "7", "cash", 5), forged]))
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(
        outcome_of(&first[0]),
        GrantOutcome::Granted,
        "inside the window: {first:?}"
    );
    assert_eq!(
        (outcome_of(&first[1]), first[1].error_code.as_str()),
        (GrantOutcome::Invalid, "PROOF_FORGED"),
        "a wrong proof is refused even inside the window"
    );
    // The window ends by itself, no restart: the next unproven event is refused. Time
    // is the subject: the window's end must pass.
    while reward_runtime::clock::now_ms() < until_ms + 100 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = c
        .grant_batch(batch(vec![event("w:late", "7", "cash", 5)]))
        .await
        .unwrap()
        .into_inner()
        .results;
    assert_eq!(
        (outcome_of(&after[0]), after[0].error_code.as_str()),
        (GrantOutcome::Invalid, "PROOF_MISSING"),
        "{after:?}"
    );
    assert_eq!(spent(&r).await, 5);
    r.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A downstream that refuses every credit for good (`ACCOUNT_CLOSED`).
async fn closed_downstream() -> String {
    let app = axum::Router::new().route(
        "/credit",
        axum::routing::post(|| async {
            (
                axum::http::StatusCode::FORBIDDEN,
                axum::Json(json!({"code": "ACCOUNT_CLOSED"})),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/credit")
}

/// A downstream that answers each credit `delay` after it came: its URL, and how many
/// credits have reached it.
async fn slow_downstream(delay: Duration) -> (String, Arc<AtomicUsize>) {
    let reached = Arc::new(AtomicUsize::new(0));
    let counter = reached.clone();
    let app = axum::Router::new().route(
        "/credit",
        axum::routing::post(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                // Time is the subject: a downstream this slow.
                tokio::time::sleep(delay).await;
                axum::Json(json!({"ref": "slow-1"}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/credit"), reached)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_grant_in_flight_finish_then_refuses_new_calls() {
    let tag = format!("s{:08x}", rand::random::<u32>());
    create_topics(&tag).await;
    let (url, reached) = slow_downstream(Duration::from_millis(800)).await;
    let dir = unique_dir(&tag);
    let extra = format!("[downstreams.gem]\nkind = \"http\"\nurl = \"{url}\"\ntimeout_ms = 5000\n");
    let cfg = service_config(&tag, &dir, 1_000, &extra);
    let r = start(&cfg).await.unwrap();
    let addr = r.grpc_addr;
    let mut c = client(&r).await;
    let in_flight = tokio::spawn(async move {
        c.grant(authed(GrantRequest {
            event: Some(event("slow:1", "9", "gem", 3)),
        }))
        .await
    });
    reward_testkit::eventually(
        Duration::from_secs(30),
        "the grant's credit in flight at the downstream",
        async || reached.load(Ordering::SeqCst) == 1,
    )
    .await;
    let report = r.shutdown().await;
    let res = in_flight
        .await
        .unwrap()
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(outcome_of(&res), GrantOutcome::Granted, "{res:?}");
    assert_eq!(res.downstream_ref, "slow-1");
    assert!(report.drained);
    assert_eq!(report.left, 0);
    assert!(
        RewardServiceClient::connect(format!("http://{addr}"))
            .await
            .is_err(),
        "the listener is closed after shutdown"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_goes_away_mid_batch_does_not_leave_credited_grants_unmarked() {
    // A consumer killed with SIGKILL while its GrantBatch is in flight: tonic drops
    // the handler when the client goes away. If the grant work went with it after the
    // downstream had credited, the records would stay IN_PROGRESS, and when their lease
    // ran out a redelivery would credit them again. The work must finish whatever the
    // caller does.
    let tag = format!("g{:08x}", rand::random::<u32>());
    create_topics(&tag).await;
    let (url, _) = slow_downstream(Duration::from_millis(600)).await;
    let dir = unique_dir(&tag);
    let extra = format!("[downstreams.gem]\nkind = \"http\"\nurl = \"{url}\"\ntimeout_ms = 5000\n");
    let cfg = service_config(&tag, &dir, 1_000, &extra);
    let r = start(&cfg).await.unwrap();
    let mut c = client(&r).await;
    let events: Vec<RewardEvent> = (0..5)
        .map(|i| event(&format!("gone:{i}"), "9", "gem", 2))
        .collect();
    let mut req = authed(proto::v1::GrantBatchRequest {
        events,
        ..Default::default()
    });
    // The caller gives up (and resets its stream) while the credits are in flight.
    req.set_timeout(Duration::from_millis(150));
    assert!(c.grant_batch(req).await.is_err(), "the call timed out");
    drop(c);
    let claims = r.service().granter().claims().clone();
    // Nothing else grants these trade numbers: only the abandoned call's own work can
    // mark them.
    reward_testkit::eventually(
        Duration::from_secs(30),
        "the abandoned batch's grants marked",
        async || {
            for i in 0..5 {
                let rec = claims.record(&format!("gone:{i}")).await.unwrap();
                match rec {
                    Some(rec) if rec.state == reward_service::claim::ClaimState::Granted => {}
                    other => return Err(format!("gone:{i}: {other:?}")),
                }
            }
            Ok(())
        },
    )
    .await;
    for i in 0..5 {
        let rec = claims
            .record(&format!("gone:{i}"))
            .await
            .unwrap()
            .expect("a record");
        assert_eq!(
            rec.state,
            reward_service::claim::ClaimState::Granted,
            "gone:{i} was credited but not marked: {rec:?}"
        );
    }
    r.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_credential_opens_its_own_api_only_and_metrics_need_the_grant_credential() {
    let tag = format!("c{:08x}", rand::random::<u32>());
    create_topics(&tag).await;
    let dir = unique_dir(&tag);
    let cfg = service_config(&tag, &dir, 1_000, "");
    let service = reward_service::server::build(&cfg).await.unwrap();
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .build_recorder()
        .handle();
    let r = reward_service::server::serve_with_metrics(service, &cfg, Some(handle))
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let body = json!({"user_id": "1", "activity_id": "cny", "tokens": []});
    let validate = |cred: &'static str| {
        client
            .post(http(&r, "/v1/tokens/validate"))
            .bearer_auth(cred)
            .json(&body)
            .send()
    };
    // A stolen grant credential does not open the wallet routes, nor the reverse.
    assert_eq!(
        validate(WALLET_CREDENTIAL).await.unwrap().status().as_u16(),
        200
    );
    assert_eq!(validate(CREDENTIAL).await.unwrap().status().as_u16(), 401);
    let mut c = RewardServiceClient::connect(format!("http://{}", r.grpc_addr))
        .await
        .unwrap();
    let mut req = tonic::Request::new(GrantRequest {
        event: Some(event("cred:1", "9", "cash", 3)),
    });
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {WALLET_CREDENTIAL}").parse().unwrap(),
    );
    let e = c.grant(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    // /metrics: budgets are not for wallets, nor for anyone without a credential.
    let metrics = |cred: Option<&'static str>| {
        let mut req = client.get(http(&r, "/metrics"));
        if let Some(c) = cred {
            req = req.bearer_auth(c);
        }
        req.send()
    };
    assert_eq!(metrics(None).await.unwrap().status().as_u16(), 401);
    assert_eq!(
        metrics(Some(WALLET_CREDENTIAL))
            .await
            .unwrap()
            .status()
            .as_u16(),
        401
    );
    assert_eq!(
        metrics(Some(CREDENTIAL)).await.unwrap().status().as_u16(),
        200
    );
    r.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_tokens_and_bad_stored_tokens_credit_nothing_and_break_no_page() {
    let tag = format!("x{:08x}", rand::random::<u32>());
    let (r, dir) = running(&tag, 1_000_000).await;
    let sdk = r.service().sdk().clone();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let token = |trade_no: &str, scene: &str, granted: i64, expires: i64| RewardToken {
        trade_no: trade_no.into(),
        user_id: "2001".into(),
        activity_id: "cny".into(),
        scene_id: scene.into(),
        reward_type: "cash".into(),
        amount: 70,
        grant_time_ms: granted,
        expires_at_ms: expires,
        ..Default::default()
    };
    let store = sdk.store();
    let mut sealed = Vec::new();
    for t in [
        // Expired weeks ago.
        token(
            "cny:rain:old:1",
            "rain",
            now - 30 * 86_400_000,
            now - 21 * 86_400_000,
        ),
        // Not expired, but older than the service keeps records (retention 1 h here).
        token(
            "cny:rain:old:2",
            "rain",
            now - 2 * 3_600_000,
            now + 86_400_000,
        ),
        // Valid: the control.
        token("cny:rain:ok:3", "rain", now, now + 86_400_000),
        // A scene id no grant can carry (written by an older SDK): it must not break
        // the page or the withdrawal of the others.
        token("cny:rain:bad:4", "a/b", now, now + 86_400_000),
    ] {
        let s = sdk.codec().seal(&t).unwrap();
        store.put("2001", "cny", &t.trade_no, &s).await.unwrap();
        sealed.push(s);
    }
    let (status, page) = get(&r, "/v1/users/2001/rewards?activity_id=cny").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["pending"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["expired"], 2, "{page}");
    assert_eq!(page["unreadable"], 1, "{page}");
    assert_eq!(page["balance"]["cash"]["pending"], 70);

    let (status, w) = post(
        &r,
        "/v1/withdraw",
        &json!({"user_id": "2001", "activity_id": "cny", "tokens": sealed}),
    )
    .await;
    assert_eq!(status, 200, "{w}");
    assert_eq!(
        validities(&w, "items"),
        ["expired", "expired", "legal", "illegal"]
    );
    assert_eq!(w["items"][2]["result"]["outcome"], "granted");
    assert_eq!(w["credited_now_amount"], 70);
    let ledger = ledger(&tag).await;
    assert_eq!(ledger.balance("2001", "cash").await.unwrap(), 70);
    r.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grant_credential_cannot_pass_a_types_ceiling_or_credit_an_event_past_retention() {
    let tag = format!("m{:08x}", rand::random::<u32>());
    create_topics(&tag).await;
    let dir = unique_dir(&tag);
    let extra = "[downstreams.gem]\nkind = \"ledger\"\nmax_amount = 10\n";
    let cfg = service_config(&tag, &dir, 1_000, extra);
    let r = start(&cfg).await.unwrap();
    let mut c = client(&r).await;
    let grant = |ev: RewardEvent| authed(GrantRequest { event: Some(ev) });
    let res = |resp: tonic::Response<proto::v1::GrantResponse>| resp.into_inner().result.unwrap();
    let over = res(c.grant(grant(event("m:1", "5", "gem", 11))).await.unwrap());
    assert_eq!(outcome_of(&over), GrantOutcome::Invalid, "{over:?}");
    assert!(over.message.contains("maximum 10"), "{over:?}");
    let batch = c
        .grant_batch(authed(proto::v1::GrantBatchRequest {
            events: vec![event("m:2", "5", "gem", 1_000_000)],
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(outcome_of(&batch.results[0]), GrantOutcome::Invalid);
    let ok = res(c.grant(grant(event("m:3", "5", "gem", 10))).await.unwrap());
    assert_eq!(outcome_of(&ok), GrantOutcome::Granted, "{ok:?}");
    // An event created longer ago than records are kept (1 h here) is refused: its
    // record may be gone, and with it the proof that it was credited.
    let old = RewardEvent {
        created_at_ms: 1_000_000_000_000,
        ..event("m:4", "5", "gem", 1)
    };
    let refused = res(c.grant(grant(old)).await.unwrap());
    assert_eq!(outcome_of(&refused), GrantOutcome::Invalid, "{refused:?}");
    let ledger = ledger(&tag).await;
    assert_eq!(ledger.balance("5", "gem").await.unwrap(), 10);
    assert_eq!(spent(&r).await, 10);

    // A stored token over its type's ceiling (an SDK with a higher limit minted it) can
    // never be credited: the wallet shows it apart, never as pending money.
    let sdk = r.service().sdk();
    let over = RewardToken {
        trade_no: "m:5".into(),
        user_id: "6".into(),
        activity_id: "cny".into(),
        scene_id: "rain".into(),
        reward_type: "gem".into(),
        amount: 11,
        grant_time_ms: reward_runtime::clock::now_ms(),
        expires_at_ms: reward_runtime::clock::now_ms() + 3_600_000,
        ..Default::default()
    };
    let fine = RewardToken {
        trade_no: "m:6".into(),
        amount: 4,
        ..over.clone()
    };
    let mut sealed = Vec::new();
    for t in [&over, &fine] {
        let s = sdk.codec().seal(t).unwrap();
        sdk.store().put("6", "cny", &t.trade_no, &s).await.unwrap();
        sealed.push(s);
    }
    let (status, page) = get(&r, "/v1/users/6/rewards?activity_id=cny").await;
    assert_eq!(status, 200, "{page}");
    let pending: Vec<&str> = page["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["trade_no"].as_str().unwrap())
        .collect();
    assert_eq!(pending, ["m:6"], "{page}");
    assert_eq!(page["refused"], 1, "{page}");
    assert_eq!(page["refused_trade_nos"], json!(["m:5"]), "{page}");
    assert_eq!(page["balance"]["gem"]["pending"], 4, "{page}");
    let (_, checked) = post(
        &r,
        "/v1/tokens/validate",
        &json!({"user_id": "6", "activity_id": "cny", "tokens": sealed}),
    )
    .await;
    assert_eq!(checked["results"][0]["validity"], "legal", "{checked}");
    assert_eq!(checked["results"][0]["creditable"], false, "{checked}");
    assert!(
        checked["results"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("maximum 10"),
        "{checked}"
    );
    assert_eq!(checked["results"][1]["creditable"], true, "{checked}");
    r.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Raw bytes as a gRPC message: what a client with a broken encoder sends.
#[derive(Debug, Clone, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

/// The contract's rules on the wire: undecodable bytes are INVALID_ARGUMENT (never
/// INTERNAL); an event without a creation time, or dated ahead of the service's clock
/// by more than the skew, is INVALID; a trade number repeated in one batch is claimed
/// once, its identical copy answered DUPLICATE with the first copy's receipt and a
/// differing copy CONFLICT; every batch result carries its request's position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_contract_rules_hold_on_the_wire() {
    let tag = format!("w{:08x}", rand::random::<u32>());
    let (r, dir) = running(&tag, 10_000).await;
    let mut c = client(&r).await;

    // Undecodable: a field header with a wire type protobuf does not have.
    let channel = Channel::from_shared(format!("http://{}", r.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    for path in [
        "/reward.v1.RewardService/Grant",
        "/reward.v1.RewardService/GrantAsync",
        "/reward.v1.RewardService/GrantBatch",
    ] {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.unwrap();
        let e = grpc
            .unary(
                authed(vec![0x0f, 0xff, 0xff]),
                tonic::codegen::http::uri::PathAndQuery::from_static(path),
                RawCodec,
            )
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{path}: {e:?}");
    }

    // created_at_ms: required, and at most 5 minutes ahead.
    let now = reward_runtime::clock::now_ms();
    let res = |resp: tonic::Response<proto::v1::GrantResponse>| resp.into_inner().result.unwrap();
    for (what, created, want) in [
        ("unset", 0, GrantOutcome::Invalid),
        ("negative", -5, GrantOutcome::Invalid),
        ("10 min ahead", now + 600_000, GrantOutcome::Invalid),
        ("1 min ahead", now + 60_000, GrantOutcome::Granted),
    ] {
        let ev = RewardEvent {
            created_at_ms: created,
            ..event(
                &format!("w:created:{}", what.replace(' ', "_")),
                "9",
                "cash",
                1,
            )
        };
        let got = res(c
            .grant(authed(GrantRequest { event: Some(ev) }))
            .await
            .unwrap());
        assert_eq!(outcome_of(&got), want, "{what}: {got:?}");
        if want == GrantOutcome::Invalid {
            assert!(got.message.starts_with("created_at_ms"), "{what}: {got:?}");
        }
    }

    // One batch: a reward, its copy, a differing copy, another reward, an empty trade
    // number, and the first reward once more.
    let a = event("w:a", "10", "cash", 5);
    let batch = vec![
        a.clone(),
        a.clone(),
        RewardEvent {
            amount: 6,
            ..a.clone()
        },
        event("w:b", "10", "cash", 7),
        event("", "10", "cash", 1),
        a.clone(),
    ];
    let results = c
        .grant_batch(authed(GrantBatchRequest {
            events: batch,
            require_proof: false,
        }))
        .await
        .unwrap()
        .into_inner()
        .results;
    let got: Vec<(u32, &str, GrantOutcome, &str)> = results
        .iter()
        .map(|r| {
            (
                r.index,
                r.trade_no.as_str(),
                outcome_of(r),
                r.error_code.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (0, "w:a", GrantOutcome::Granted, ""),
            (1, "w:a", GrantOutcome::Duplicate, ""),
            (2, "w:a", GrantOutcome::Conflict, "CONFLICT"),
            (3, "w:b", GrantOutcome::Granted, ""),
            (4, "", GrantOutcome::Invalid, "INVALID"),
            (5, "w:a", GrantOutcome::Duplicate, ""),
        ]
    );
    assert!(!results[0].downstream_ref.is_empty());
    assert_eq!(results[1].downstream_ref, results[0].downstream_ref);
    assert_eq!(results[5].downstream_ref, results[0].downstream_ref);
    // Credited once: 5 + 7, and the one-minute-ahead grant's 1.
    assert_eq!(ledger(&tag).await.balance("10", "cash").await.unwrap(), 12);
    assert_eq!(ledger(&tag).await.balance("9", "cash").await.unwrap(), 1);
    // The same batch again: every copy of a credited reward is DUPLICATE.
    let again = c
        .grant_batch(authed(GrantBatchRequest {
            events: vec![a.clone(), a.clone()],
            require_proof: false,
        }))
        .await
        .unwrap()
        .into_inner()
        .results;
    assert!(
        again
            .iter()
            .all(|r| outcome_of(r) == GrantOutcome::Duplicate
                && r.downstream_ref == results[0].downstream_ref),
        "{again:?}"
    );
    // A copy that differs from the first is judged by the store unless the first was
    // credited: the record may hold the copy's own fields (then DUPLICATE), or none.
    let right = event("w:r", "10", "cash", 2);
    let first = res(c
        .grant(authed(GrantRequest {
            event: Some(right.clone()),
        }))
        .await
        .unwrap());
    assert_eq!(outcome_of(&first), GrantOutcome::Granted);
    let over = |n: i64| event("w:x", "10", "cash", 20_000 + n);
    let batch = vec![
        RewardEvent {
            amount: 9,
            ..right.clone()
        },
        right.clone(),
        over(1),
        event("w:x", "10", "cash", 3),
    ];
    let results = c
        .grant_batch(authed(GrantBatchRequest {
            events: batch,
            require_proof: false,
        }))
        .await
        .unwrap()
        .into_inner()
        .results;
    let got: Vec<(GrantOutcome, &str)> = results
        .iter()
        .map(|r| (outcome_of(r), r.error_code.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (GrantOutcome::Conflict, "CONFLICT"),
            (GrantOutcome::Duplicate, ""),
            (GrantOutcome::BudgetExhausted, "BUDGET_EXHAUSTED"),
            (GrantOutcome::Granted, ""),
        ],
        "{results:?}"
    );
    assert_eq!(results[1].downstream_ref, first.downstream_ref);
    // Versions of one trade number take a round each, four at most.
    let versions: Vec<RewardEvent> = (10..16)
        .map(|n| event("w:v", "10", "cash", 20_000 + n))
        .collect();
    let results = c
        .grant_batch(authed(GrantBatchRequest {
            events: versions,
            require_proof: false,
        }))
        .await
        .unwrap()
        .into_inner()
        .results;
    let got: Vec<&str> = results.iter().map(|r| r.error_code.as_str()).collect();
    assert_eq!(
        got,
        vec![
            "BUDGET_EXHAUSTED",
            "BUDGET_EXHAUSTED",
            "BUDGET_EXHAUSTED",
            "BUDGET_EXHAUSTED",
            "REPEATED_IN_BATCH",
            "REPEATED_IN_BATCH"
        ]
    );
    assert_eq!(outcome_of(&results[5]), GrantOutcome::RetryLater);
    assert_eq!(spent(&r).await, 13 + 2 + 3);
    assert_eq!(
        ledger(&tag).await.balance("10", "cash").await.unwrap(),
        12 + 2 + 3
    );
    r.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

fn admin<T>(msg: T, credential: &str) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut().insert(
        "authorization",
        format!("bearer {credential}").parse().unwrap(),
    );
    req
}

/// Budgets over the admin API: only the admin credential opens it (and it opens no
/// grant); any scene can be read and set, config or not; never below what was spent;
/// every change on the change trail; `reward-ctl budget --service` does the same from
/// the environment's credential, with no config file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_are_read_and_set_over_the_admin_api_with_its_own_credential() {
    use proto::v1::budget_admin_client::BudgetAdminClient;
    use proto::v1::{GetBudgetRequest, SetBudgetRequest};
    let tag = format!("b{:08x}", rand::random::<u32>());
    let (r, dir) = running(&tag, 100).await;
    let mut c = client(&r).await;
    let mut a = BudgetAdminClient::connect(format!("http://{}", r.grpc_addr))
        .await
        .unwrap();
    let admin_cred = reward_testkit::ADMIN_CREDENTIAL;
    let get = |activity: &str, scene: &str| GetBudgetRequest {
        activity_id: activity.into(),
        scene_id: scene.into(),
    };
    // Credentials: the grant credential cannot read a budget, the admin one cannot grant.
    for cred in [CREDENTIAL, WALLET_CREDENTIAL, "no-such-credential-0000000"] {
        let e = a
            .get_budget(admin(get("cny", "rain"), cred))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    }
    let mut g = tonic::Request::new(GrantRequest {
        event: Some(event("b:1", "3", "cash", 1)),
    });
    g.metadata_mut().insert(
        "authorization",
        format!("Bearer {admin_cred}").parse().unwrap(),
    );
    assert_eq!(
        c.grant(g).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );

    // Spend 30 of the configured scene, then read it.
    for i in 0..3 {
        let got = c
            .grant(authed(GrantRequest {
                event: Some(event(&format!("b:g{i}"), "3", "cash", 10)),
            }))
            .await
            .unwrap()
            .into_inner()
            .result
            .unwrap();
        assert_eq!(outcome_of(&got), GrantOutcome::Granted, "{got:?}");
    }
    let b = a
        .get_budget(admin(get("cny", "rain"), admin_cred))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (b.configured, b.total, b.spent, b.remaining),
        (true, 100, 30, 70)
    );
    // Below what was spent: refused, nothing changed.
    let set = |activity: &str, scene: &str, total: i64| SetBudgetRequest {
        activity_id: activity.into(),
        scene_id: scene.into(),
        total,
        reason: "test".into(),
    };
    let e = a
        .set_budget(admin(set("cny", "rain", 29), admin_cred))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    for (activity, scene, total) in [("cny", "ra/in", 5), ("", "rain", 5), ("cny", "rain", -1)] {
        let e = a
            .set_budget(admin(set(activity, scene, total), admin_cred))
            .await
            .unwrap_err();
        assert_eq!(
            e.code(),
            tonic::Code::InvalidArgument,
            "{activity}/{scene} {total}: {e:?}"
        );
    }
    // A scene no config names: not set, then set, then its grants spend it.
    let b = a
        .get_budget(admin(get("cny", "snow"), admin_cred))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((b.configured, b.total, b.spent), (false, 0, 0));
    let snow = RewardEvent {
        scene_id: "snow".into(),
        ..event("b:snow", "3", "cash", 4)
    };
    let refused = c
        .grant(authed(GrantRequest {
            event: Some(snow.clone()),
        }))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(refused.error_code, "NO_BUDGET", "{refused:?}");
    let changed = a
        .set_budget(admin(set("cny", "snow", 50), admin_cred))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(changed.before.unwrap().total, 0);
    assert_eq!(changed.after.unwrap().total, 50);
    let got = c
        .grant(authed(GrantRequest { event: Some(snow) }))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(outcome_of(&got), GrantOutcome::Granted, "{got:?}");

    // reward-ctl, with the credential in a file and no config file at all.
    let cred_file = dir.join("admin.token");
    std::fs::write(&cred_file, format!("{admin_cred}\n")).unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(common::workspace_bin("reward-ctl"))
            .args(["--service-config", "/nonexistent.toml"])
            .args(args)
            .env_remove("REWARD_ADMIN_TOKEN")
            .env("REWARD_ADMIN_TOKEN_FILE", &cred_file)
            .env("REWARD_SERVICE_GRPC", format!("http://{}", r.grpc_addr))
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, out, err) = run(&["budget", "cny/snow"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "budget cny/snow: total 50 spent 4 remaining 46");
    let (code, out, err) = run(&[
        "--who",
        "ops-test",
        "budget",
        "cny/snow",
        "80",
        "--reason",
        "more snow",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "budget cny/snow: 50 -> 80 (spent 4)");
    let (code, _, err) = run(&["budget", "cny/snow", "3"]);
    assert_eq!(code, Some(2), "below spent is refused: {err}");
    let b = a
        .get_budget(admin(get("cny", "snow"), admin_cred))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (b.total, b.spent),
        (80, 4),
        "a refused change changes nothing"
    );
    assert!(err.contains("FailedPrecondition"), "{err}");
    assert!(!err.contains(admin_cred), "the credential is never printed");
    let (code, _, err) = run(&["budget", "snow", "3"]);
    assert_eq!(code, Some(2), "{err}");
    // The trail holds both changes, with who made them.
    let redis = fred::clients::Client::new(
        fred::types::config::Config::from_url(&common::redis_url()).unwrap(),
        None,
        None,
        None,
    );
    fred::interfaces::ClientLike::init(&redis).await.unwrap();
    let lines: Vec<String> = fred::interfaces::SortedSetsInterface::zrevrange(
        &redis,
        "reward:config:audit",
        0,
        20,
        false,
    )
    .await
    .unwrap();
    let ours: Vec<reward_service::trail::TrailEntry> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<reward_service::trail::TrailEntry>(l).ok())
        .filter(|e| {
            e.key == "budget:cny/snow" && e.at_unix_ms >= reward_runtime::clock::now_ms() - 120_000
        })
        .collect();
    assert!(
        ours.iter()
            .any(|e| e.old.is_none() && e.new.as_deref() == Some("50")),
        "{ours:?}"
    );
    assert!(
        ours.iter().any(|e| e.old.as_deref() == Some("50")
            && e.new.as_deref() == Some("80")
            && e.who.contains("ops-test: more snow")),
        "{ours:?}"
    );
    r.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
