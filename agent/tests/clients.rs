//! Each client runs the shared scenarios (`clients/conformance/scenarios.json`) with
//! its own test runner against a real agent binary on the stack; then this harness
//! checks what only it can see: every reward a client was answered for is on a broker
//! (its event) and, answered as stored, in the token store; every token opens for its
//! user and activity with the agent's key ring.
//!
//! The runners' interpreters and tools come from `ops/test` (the stack tier makes the
//! Python client's virtualenv and sets `REWARD_CLIENTS_PYTHON`); a missing one fails
//! here, never skips.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reward_stack::topics::{create_kafka_topics, create_rocketmq_topics};
use reward_testkit::{repo, stack, temp_dir, unique};
use sdk::token::{KeyRing, TokenCodec};

/// A started agent binary with its config, key ring and topic.
struct Agent {
    child: Child,
    socket: PathBuf,
    config: PathBuf,
    keys: String,
    topic: String,
    store: sdk::config::StoreConfig,
    log: PathBuf,
}

impl Agent {
    fn start(tag: &str) -> Self {
        let s = stack();
        let topic = format!("{tag}-massive");
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            create_kafka_topics(&s.kafka_brokers, &[topic.as_str()], 2)
                .await
                .unwrap();
            create_rocketmq_topics(&s.rocketmq_namesrv, &[topic.as_str()])
                .await
                .unwrap();
        });
        let dir = temp_dir(tag);
        let socket = dir.join("agent.sock");
        let config = dir.join("agent.toml");
        let text = format!(
            r#"
            [listen]
            socket = "{socket}"
            [admin]
            addr = "127.0.0.1:0"
            [drain]
            timeout_ms = 30000
            [sdk]
            default_queue = "massive"
            [sdk.store]
            redis_url = "{redis}"
            key_prefix = "{tag}"
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
            socket = socket.display(),
            redis = s.redis_url,
            kafka = s.kafka_brokers,
            namesrv = s.rocketmq_namesrv,
            spool = dir.join("spool").display(),
        );
        std::fs::write(&config, &text).unwrap();
        let store = reward_agent::AgentConfig::from_toml_str(&text, &[])
            .unwrap()
            .sdk
            .store;
        let keys = format!("1:{}", fresh_key());
        let log = dir.join("agent.log");
        let child = spawn_agent(&config, &keys, &log);
        let agent = Agent {
            child,
            socket,
            config,
            keys,
            topic,
            store,
            log,
        };
        agent.wait_serving();
        agent
    }

    fn wait_serving(&self) {
        let until = Instant::now() + Duration::from_secs(60);
        while !self.socket.exists() {
            assert!(
                Instant::now() < until,
                "the agent did not serve within 60 s; log {}",
                self.log.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM; the agent must drain and exit 0.
    fn stop(mut self) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(
                    st.success(),
                    "the agent stopped with {st}; log {}",
                    self.log.display()
                );
                return;
            }
            assert!(Instant::now() < until, "the agent did not stop within 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Agent {
    /// A failed test leaves no agent behind (a stopped one has exited already).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_agent(config: &Path, keys: &str, log: &Path) -> Child {
    let out = std::fs::File::create(log).unwrap();
    Command::new(env!("CARGO_BIN_EXE_reward-agent"))
        .arg("--config")
        .arg(config)
        .env("REWARD_TOKEN_KEYS", keys)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

/// A fresh token key, base64 (the key ring's text form is `id:base64`).
fn fresh_key() -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 32]>())
}

/// One issued reward a runner recorded: the books' sent line and the token.
#[derive(Debug)]
struct Answered {
    trade_no: String,
    user_id: String,
    activity_id: String,
    stored: bool,
    token: String,
}

fn read_answered(path: &Path) -> Vec<Answered> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("the runner wrote no {}: {e}", path.display()));
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 10, "malformed line {l:?}");
            Answered {
                trade_no: f[0].into(),
                user_id: f[1].into(),
                activity_id: f[2].into(),
                stored: f[7] == "1",
                token: f[9].into(),
            }
        })
        .collect()
}

/// Runs one language's runner against `agent`, then checks every reward it recorded.
fn run_client(lang: &str, mut runner: Command, agent: &Agent, tag: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let out = temp_dir(&format!("{tag}-out"));
    let status = runner
        .current_dir(repo())
        .env("REWARD_AGENT_SOCKET", &agent.socket)
        .env("REWARD_AGENT_BIN", env!("CARGO_BIN_EXE_reward-agent"))
        .env("REWARD_AGENT_CONFIG", &agent.config)
        .env("REWARD_TOKEN_KEYS", &agent.keys)
        .env("CONFORMANCE_TAG", tag)
        .env("CONFORMANCE_OUT", &out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the {lang} runner: {e}"));
    assert!(status.success(), "the {lang} client's scenarios failed");

    let answered = read_answered(&out.join(format!("{lang}.sent.tsv")));
    let distinct: std::collections::BTreeSet<&str> =
        answered.iter().map(|a| a.trade_no.as_str()).collect();
    let sc: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("clients/conformance/scenarios.json")).unwrap(),
    )
    .unwrap();
    let want = 2 + sc["batch"]["size"].as_u64().unwrap() + sc["kill"]["rewards"].as_u64().unwrap();
    assert_eq!(
        (answered.len() as u64, distinct.len() as u64),
        (want, want),
        "{lang}: issued rewards recorded (lines, distinct trade numbers)"
    );

    // Every token opens for its user and activity with the agent's keys.
    let codec = TokenCodec::new(KeyRing::parse(&agent.keys, None).unwrap());
    for a in &answered {
        let t = codec
            .open(&a.token, &a.user_id, &a.activity_id)
            .unwrap_or_else(|e| panic!("{lang}: the token of {} does not open: {e:?}", a.trade_no));
        assert_eq!(t.trade_no, a.trade_no);
    }

    // Answered as stored: in the store.
    rt.block_on(async {
        let store = sdk::store::TokenStore::connect(agent.store.clone())
            .await
            .unwrap();
        let mut by_user: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
        for a in answered.iter().filter(|a| a.stored) {
            by_user
                .entry((&a.user_id, &a.activity_id))
                .or_default()
                .push(&a.trade_no);
        }
        for ((user, activity), trades) in by_user {
            let held = store.list(user, activity).await.unwrap();
            for t in trades {
                assert!(
                    held.contains_key(t),
                    "{lang}: {t} answered stored, not in the store"
                );
            }
        }
    });

    // Answered from the queue or the spool (not stored): the event is on a broker
    // (a spooled one once the restarted agent replayed it). A reward answered stored
    // may have died with a killed agent before its event left: its due entry in
    // Redis makes the sweeper credit it, so only its token is required (above).
    let unstored: Vec<&Answered> = answered.iter().filter(|a| !a.stored).collect();
    if !unstored.is_empty() {
        let s = stack();
        let mut seen = reward_testkit::readback::read_kafka(
            &s.kafka_brokers,
            &agent.topic,
            usize::MAX,
            Duration::from_secs(5),
        )
        .unwrap()
        .seen;
        let rocket = rt
            .block_on(reward_testkit::readback::read_rocketmq(
                &s.rocketmq_namesrv,
                &agent.topic,
                usize::MAX,
                Duration::from_secs(5),
            ))
            .unwrap();
        seen.extend(rocket.seen);
        let missing: Vec<_> = unstored
            .iter()
            .filter(|a| !seen.contains_key(&a.trade_no))
            .map(|a| a.trade_no.as_str())
            .collect();
        assert!(
            missing.is_empty(),
            "{lang}: {} rewards answered from the queue or spool are on no broker: {:?}",
            missing.len(),
            &missing[..missing.len().min(10)]
        );
    }
}

#[test]
fn the_python_client_runs_the_shared_scenarios() {
    let python = std::env::var("REWARD_CLIENTS_PYTHON").expect(
        "REWARD_CLIENTS_PYTHON is not set: ops/test (stack tier) makes the Python client's virtualenv and sets it",
    );
    let tag = unique("cl-py");
    let agent = Agent::start(&tag);
    let mut runner = Command::new(python);
    runner.args([
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "clients/python/tests/test_agent.py",
    ]);
    run_client("python", runner, &agent, &tag);
    agent.stop();
}
