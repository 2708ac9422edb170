//! The agent against the real stack (Redis and both brokers), through its socket, with
//! the scenarios every client runs (`clients/conformance/scenarios.json`): one reward
//! and a batch issued with their tokens stored, every documented bad input refused
//! with its code and field, a batch over the limit refused whole, TCP only with the
//! credential, and a stop that leaves nothing behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use proto::v1::reward_agent_client::RewardAgentClient;
use proto::v1::send_reward_reply::Result as Answer;
use proto::v1::{
    AgentErrorCode, AgentHealthRequest, HeldBy, SendRewardReply, SendRewardRequest,
    SendRewardsRequest, UserInfo,
};
use reward_agent::AgentConfig;
use reward_stack::topics::{create_kafka_topics, create_rocketmq_topics};
use reward_testkit::{stack, temp_dir, unique};
use sdk::token::KeyRing;
use serde_json::Value;
use tonic::transport::Channel;

const CREDENTIAL: &str = "agent-test-credential-0123456789";

/// An agent config on the stack: its own socket, topics, key prefix and spool.
async fn config(tag: &str, tcp: bool) -> AgentConfig {
    let s = stack();
    let topic = format!("{tag}-massive");
    create_kafka_topics(&s.kafka_brokers, &[topic.as_str()], 2)
        .await
        .unwrap();
    create_rocketmq_topics(&s.rocketmq_namesrv, &[topic.as_str()])
        .await
        .unwrap();
    let dir = temp_dir(tag);
    let tcp_line = if tcp { "tcp = \"127.0.0.1:0\"" } else { "" };
    let text = format!(
        r#"
        [listen]
        socket = "{socket}"
        {tcp_line}
        [admin]
        addr = "127.0.0.1:0"
        [drain]
        timeout_ms = 20000
        [sdk]
        default_queue = "massive"
        [sdk.store]
        redis_url = "{redis}"
        key_prefix = "{tag}"
        # Every answer from the store, whatever the machine's speed: the test reads
        # each token back right after its answer.
        answer_from_queue = false
        [sdk.producers.kafka]
        kind = "kafka"
        brokers = "{kafka}"
        [sdk.producers.rocketmq]
        kind = "rocketmq"
        namesrv = "{namesrv}"
        group = "{tag}"
        [sdk.queues.massive]
        topic = "{topic}"
        primary = "kafka"
        backup = "rocketmq"
        ratio = 100
        [sdk.types.cash]
        [sdk.spool]
        dir = "{spool}"
        "#,
        socket = dir.join("agent.sock").display(),
        redis = s.redis_url,
        kafka = s.kafka_brokers,
        namesrv = s.rocketmq_namesrv,
        spool = dir.join("spool").display(),
    );
    let env = vec![(
        reward_agent::config::TOKEN_VAR.to_string(),
        CREDENTIAL.to_string(),
    )];
    AgentConfig::from_toml_str(&text, &env).unwrap()
}

fn scenarios() -> Value {
    let path = reward_testkit::repo().join("clients/conformance/scenarios.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// A value of the scenarios, `{"repeat": C, "count": N}` expanded.
fn expand(v: &Value) -> Value {
    match v {
        Value::Object(m) if m.len() == 2 && m.contains_key("repeat") && m.contains_key("count") => {
            let c = m["repeat"].as_str().unwrap();
            Value::String(c.repeat(usize::try_from(m["count"].as_u64().unwrap()).unwrap()))
        }
        Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (k.clone(), expand(x))).collect()),
        other => other.clone(),
    }
}

/// The scenarios' base reward for `user`, with `set` laid over it.
fn reward(sc: &Value, tag: &str, user: &str, set: Option<&Value>) -> SendRewardRequest {
    let mut doc = sc["base"].as_object().unwrap().clone();
    if let Some(Value::Object(set)) = set {
        for (k, v) in set {
            doc.insert(k.clone(), expand(v));
        }
    }
    let fill = |v: &Value| {
        v.as_str()
            .unwrap_or_default()
            .replace("{tag}", tag)
            .replace("{user}", user)
    };
    let user = match &doc["user"] {
        Value::Object(u) => Some(UserInfo {
            user_id: u.get("user_id").map(fill).unwrap_or_default(),
            device_id: u.get("device_id").map(fill).unwrap_or_default(),
            app_id: u.get("app_id").map(fill).unwrap_or_default(),
        }),
        _ => None,
    };
    SendRewardRequest {
        trade_no: fill(&doc["trade_no"]),
        user,
        activity_id: fill(&doc["activity_id"]),
        scene_id: fill(&doc["scene_id"]),
        reward_type: fill(&doc["reward_type"]),
        amount: doc["amount"].as_i64().unwrap(),
        description: fill(&doc["description"]),
        extension: doc["extension"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect(),
    }
}

fn issued(reply: &SendRewardReply) -> &proto::v1::IssuedReward {
    match &reply.result {
        Some(Answer::Issued(i)) => i,
        other => panic!("not issued: {other:?}"),
    }
}

async fn connect(socket: &std::path::Path) -> RewardAgentClient<Channel> {
    reward_agent::client::unix(socket).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_scenarios_through_the_socket() {
    let tag = unique("agent-sc");
    let cfg = config(&tag, false).await;
    let store_cfg = cfg.sdk.store.clone();
    let ring = KeyRing::random(1);
    let running = reward_agent::start(cfg, Some(ring.clone()), None)
        .await
        .unwrap();
    let mut agent = connect(&running.socket).await;
    let sc = scenarios();
    assert!(
        agent
            .health(AgentHealthRequest {})
            .await
            .unwrap()
            .into_inner()
            .serving
    );

    // One reward: issued, its token stored and sealed for this reward.
    let one = reward(&sc, &tag, "u-one", None);
    let reply = agent.send_reward(one.clone()).await.unwrap().into_inner();
    let got = issued(&reply);
    assert_eq!(got.trade_no, one.trade_no);
    assert_eq!(got.held_by(), HeldBy::Store);
    let opened = sdk::token::TokenCodec::new(ring.clone())
        .open(&got.token, "u-one", &one.activity_id)
        .unwrap();
    assert_eq!(opened.trade_no, one.trade_no);
    let store = sdk::store::TokenStore::connect(store_cfg).await.unwrap();
    let listed = store.list("u-one", &one.activity_id).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");

    // The same reward again: answered again, still one token in the store.
    let again = agent.send_reward(one.clone()).await.unwrap().into_inner();
    assert_eq!(issued(&again).trade_no, one.trade_no);
    assert_eq!(
        store.list("u-one", &one.activity_id).await.unwrap().len(),
        1
    );

    // A batch: one answer per reward, in order.
    let n = usize::try_from(sc["batch"]["size"].as_u64().unwrap()).unwrap();
    let batch: Vec<_> = (0..n)
        .map(|i| reward(&sc, &tag, &format!("u-batch-{i}"), None))
        .collect();
    let replies = agent
        .send_rewards(SendRewardsRequest {
            rewards: batch.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .replies;
    assert_eq!(replies.len(), n);
    for (r, a) in batch.iter().zip(&replies) {
        assert_eq!(issued(a).trade_no, r.trade_no);
    }

    // Every documented bad input: its code and field, nothing stored.
    let bad = sc["bad_inputs"].as_array().unwrap();
    assert!(bad.len() >= 20);
    for case in bad {
        let r = reward(&sc, &tag, "u-bad", Some(&case["set"]));
        let reply = agent.send_reward(r).await.unwrap().into_inner();
        let Some(Answer::Error(e)) = reply.result else {
            panic!("{}: not refused: {reply:?}", case["name"]);
        };
        let want = AgentErrorCode::from_str_name(case["code"].as_str().unwrap()).unwrap();
        assert_eq!(
            (e.code(), e.field.as_str()),
            (want, case["field"].as_str().unwrap()),
            "{}: {e:?}",
            case["name"]
        );
    }
    assert!(store.list("u-bad", &tag).await.unwrap().is_empty());

    // A batch over the limit: refused whole.
    let over = usize::try_from(sc["over_batch"]["size"].as_u64().unwrap()).unwrap();
    let err = agent
        .send_rewards(SendRewardsRequest {
            rewards: (0..over)
                .map(|i| reward(&sc, &tag, &format!("u-over-{i}"), None))
                .collect(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(store.list("u-over-0", &tag).await.unwrap().is_empty());

    // A clean stop: nothing left, the socket gone, calls then fail as calls.
    let socket = running.socket.clone();
    let report = running.shutdown().await;
    assert_eq!(
        (report.calls_cut, report.events_left, report.tokens_left),
        (false, 0, 0),
        "{report:?}"
    );
    assert!(!socket.exists());
    let after = tokio::time::timeout(
        Duration::from_secs(10),
        agent.send_reward(reward(&sc, &tag, "u-late", None)),
    )
    .await
    .unwrap();
    assert!(after.is_err(), "answered after the stop: {after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tcp_only_with_the_credential() {
    let tag = unique("agent-tcp");
    let cfg = config(&tag, true).await;
    let running = reward_agent::start(cfg, Some(KeyRing::random(1)), None)
        .await
        .unwrap();
    let addr = running.tcp_addr.unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let sc = scenarios();
    let r = reward(&sc, &tag, "u-tcp", None);
    let call = |auth: Option<String>| {
        let (channel, r) = (channel.clone(), r.clone());
        async move {
            let mut req = tonic::Request::new(r);
            if let Some(a) = auth {
                req.metadata_mut()
                    .insert("authorization", a.parse().unwrap());
            }
            RewardAgentClient::new(channel).send_reward(req).await
        }
    };
    for wrong in [None, Some("Bearer not-the-credential-000000".to_string())] {
        let e = call(wrong).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
    }
    let reply = call(Some(format!("Bearer {CREDENTIAL}")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(issued(&reply).trade_no, r.trade_no);
    let report = running.shutdown().await;
    assert_eq!((report.events_left, report.tokens_left), (0, 0));
}
