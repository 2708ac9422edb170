//! Every client runs the shared scenarios (`clients/conformance/scenarios.json`) with
//! its own test runner, each against a real agent binary of its own on the stack, all
//! four agents sending into one run's topics; a reward service and a consumer per
//! broker (`loadtest::replay::pipeline`) credit what they send. Then this harness
//! checks what only it can see: every token a client was answered opens for its user
//! and activity with the run's key ring, one token of each language is legal and
//! credited in the wallet API (`/v1/tokens/validate`), and the run's books
//! (`loadtest::reconcile`, `reward_tools::books`) find every answered reward credited
//! exactly once, none double, no budget overspent, every stored token accounted for.
//!
//! The runners' interpreters and tools come from `ops/test` (the stack tier makes the
//! Python client's virtualenv and sets `REWARD_CLIENTS_PYTHON`, checks the Go toolchain
//! and sets `REWARD_CLIENTS_GO`, installs the TypeScript client's packages and sets
//! `REWARD_CLIENTS_NPM`, checks the JDK and Maven and sets `REWARD_CLIENTS_MVN`); a
//! missing one fails here, never skips.
//!
//! With `REWARD_CLIENTS_BENCH=N` each language also sends N rewards through its agent
//! as fast as `BENCH_CONCURRENCY` (default 16) senders can, one reward a call, and the
//! test prints each language's rate and call latencies (figures only: nothing about
//! speed is asserted); those rewards are in the books too. For figures, run it with a
//! release agent: `REWARD_CLIENTS_AGENT_BIN=target/release/reward-agent`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use loadtest::replay::pipeline::Pipeline;
use loadtest::setup::{self, Setup};
use reward_testkit::{repo, stack, temp_dir, unique};
use sdk::token::{KeyRing, TokenCodec};

/// The clients, in the order they run.
const LANGS: [&str; 4] = ["go", "java", "python", "typescript"];

/// The agent binary: this build's, or `REWARD_CLIENTS_AGENT_BIN` (a release build, for
/// the bench's figures).
fn agent_bin() -> PathBuf {
    std::env::var_os("REWARD_CLIENTS_AGENT_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_reward-agent")),
        PathBuf::from,
    )
}

/// A started agent binary with its config.
struct Agent {
    child: Child,
    socket: PathBuf,
    config: PathBuf,
    log: PathBuf,
}

impl Agent {
    /// An agent for `lang` sending into the run's topics with the run's key ring.
    fn start(setup: &Setup, env: &reward_stack::env::StackEnv, lang: &str) -> Self {
        let dir = setup.dir.join(format!("agent-{lang}"));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("agent.sock");
        let config = dir.join("agent.toml");
        let text = format!(
            "[listen]\nsocket = {socket:?}\n[admin]\naddr = \"127.0.0.1:0\"\n\
             [drain]\ntimeout_ms = 30000\n{sdk}",
            socket = socket.display().to_string(),
            sdk = setup::embedded_sdk_toml(env, setup, &format!("agent-{lang}")),
        );
        std::fs::write(&config, &text).unwrap();
        reward_agent::AgentConfig::from_toml_str(&text, &[]).expect("the agent's config");
        let log = dir.join("agent.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(agent_bin())
            .arg("--config")
            .arg(&config)
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let mut agent = Agent {
            child,
            socket,
            config,
            log,
        };
        agent.wait_serving();
        agent
    }

    /// Until the agent says it serves (its SDK started, after the socket was bound);
    /// fails at once if it exited, and after 60 s.
    fn wait_serving(&mut self) {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                panic!("the agent exited with {st}; log {}", self.log.display());
            }
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains("reward-agent: serving on ") {
                return;
            }
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

/// The tool `ops/test` set for a language's runner.
fn tool(var: &str, what: &str) -> String {
    std::env::var(var)
        .unwrap_or_else(|_| panic!("{var} is not set: ops/test (stack tier) {what} and sets it"))
}

/// Runs `cmd` to its end, killed (and failed) after `limit`: a runner that hangs must
/// not hang the suite.
fn run_within(mut cmd: Command, what: &str, limit: Duration) -> std::process::ExitStatus {
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run the {what}: {e}"));
    let until = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the {what} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A language's runner of the agent scenarios, in its own directory.
fn runner(lang: &str) -> Command {
    match lang {
        "go" => {
            let mut c = Command::new(tool("REWARD_CLIENTS_GO", "checks the Go toolchain"));
            c.current_dir(repo().join("clients/go"))
                .env("GOFLAGS", "-buildvcs=false")
                .args([
                    "test",
                    "-tags",
                    "agent",
                    "-count=1",
                    "-run",
                    "^TestAgent",
                    ".",
                ]);
            c
        }
        "java" => {
            let mut c = Command::new(tool("REWARD_CLIENTS_MVN", "checks the JDK and Maven"));
            c.current_dir(repo().join("clients/java")).args([
                "-q",
                "-B",
                "test",
                "-Dgroups=agent",
                "-Dexcluded.groups=",
                "-Dtest=AgentScenariosTest",
                "-Dsurefire.failIfNoSpecifiedTests=false",
            ]);
            c
        }
        "python" => {
            let mut c = Command::new(tool(
                "REWARD_CLIENTS_PYTHON",
                "makes the Python client's virtualenv",
            ));
            c.current_dir(repo()).args([
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "clients/python/tests/test_agent.py",
            ]);
            c
        }
        "typescript" => {
            let mut c = Command::new(tool(
                "REWARD_CLIENTS_NPM",
                "installs the TypeScript client's packages",
            ));
            c.current_dir(repo().join("clients/typescript")).args([
                "run",
                "--silent",
                "test:agent",
            ]);
            c
        }
        other => panic!("no runner for {other}"),
    }
}

/// One issued reward a runner recorded: the books' sent line and the token.
#[derive(Debug)]
struct Answered {
    line: String,
    trade_no: String,
    user_id: String,
    activity_id: String,
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
                line: f[..9].join("\t"),
                trade_no: f[0].into(),
                user_id: f[1].into(),
                activity_id: f[2].into(),
                token: f[9].into(),
            }
        })
        .collect()
}

/// A language's bench program (`REWARD_CLIENTS_BENCH`), in its own directory.
fn bench_runner(lang: &str) -> Command {
    match lang {
        "go" => {
            let mut c = Command::new(tool("REWARD_CLIENTS_GO", "checks the Go toolchain"));
            c.current_dir(repo().join("clients/go"))
                .env("GOFLAGS", "-buildvcs=false")
                .args(["run", "./cmd/agent-bench"]);
            c
        }
        "java" => {
            let mut c = Command::new(tool("REWARD_CLIENTS_MVN", "checks the JDK and Maven"));
            c.current_dir(repo().join("clients/java")).args([
                "-q",
                "-B",
                "test",
                "-Dgroups=bench",
                "-Dexcluded.groups=",
                "-Dtest=AgentBench",
                "-Dsurefire.failIfNoSpecifiedTests=false",
            ]);
            c
        }
        "python" => {
            let mut c = Command::new(tool(
                "REWARD_CLIENTS_PYTHON",
                "makes the Python client's virtualenv",
            ));
            c.current_dir(repo()).arg("clients/python/bench.py");
            c
        }
        "typescript" => {
            let mut c = Command::new(tool(
                "REWARD_CLIENTS_NPM",
                "installs the TypeScript client's packages",
            ));
            c.current_dir(repo().join("clients/typescript"))
                .args(["run", "--silent", "bench"]);
            c
        }
        other => panic!("no bench for {other}"),
    }
}

/// Runs one language's scenarios (and, with `REWARD_CLIENTS_BENCH`, its bench) against
/// an agent of its own; the rewards it recorded and the bench's figures.
fn run_client(
    lang: &str,
    setup: &Setup,
    tag: &str,
    keys: &str,
    out: &Path,
) -> (Vec<Answered>, Option<serde_json::Value>) {
    let env = stack();
    let agent = Agent::start(setup, &env, lang);
    let with_agent = |mut c: Command| {
        c.env("REWARD_AGENT_SOCKET", &agent.socket)
            .env("REWARD_AGENT_BIN", agent_bin())
            .env("REWARD_AGENT_CONFIG", &agent.config)
            .env("REWARD_TOKEN_KEYS", keys)
            .env("CONFORMANCE_TAG", tag)
            .env("CONFORMANCE_OUT", out)
            // Outcomes, not speed: a call on a busy test machine gets 30 s before it is
            // in doubt (and the scenarios that expect an answer would fail).
            .env("CONFORMANCE_TIMEOUT_S", "30");
        c
    };
    let status = run_within(
        with_agent(runner(lang)),
        &format!("{lang} runner"),
        Duration::from_secs(600),
    );
    assert!(status.success(), "the {lang} client's scenarios failed");
    let bench = std::env::var("REWARD_CLIENTS_BENCH").ok().map(|n| {
        let mut bench = with_agent(bench_runner(lang));
        bench.env("BENCH_REWARDS", &n);
        let status = run_within(bench, &format!("{lang} bench"), Duration::from_secs(900));
        assert!(status.success(), "the {lang} client's bench failed");
        let path = out.join(format!("{lang}.bench.json"));
        serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(&path).unwrap()).unwrap()
    });
    agent.stop();

    let answered = read_answered(&out.join(format!("{lang}.sent.tsv")));
    let distinct: BTreeSet<&str> = answered.iter().map(|a| a.trade_no.as_str()).collect();
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
    // Every token opens for its user and activity with the run's keys.
    let codec = TokenCodec::new(KeyRing::parse(keys, None).unwrap());
    for a in &answered {
        let t = codec
            .open(&a.token, &a.user_id, &a.activity_id)
            .unwrap_or_else(|e| panic!("{lang}: the token of {} does not open: {e:?}", a.trade_no));
        assert_eq!(t.trade_no, a.trade_no);
    }
    let mut all = answered;
    if bench.is_some() {
        all.extend(read_answered(&out.join(format!("{lang}.bench.sent.tsv"))));
    }
    (all, bench)
}

#[test]
fn every_client_runs_the_shared_scenarios_and_each_answered_reward_is_credited_once() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let env = stack();
    let tag = unique("clients");
    let budgets: BTreeMap<String, i64> = LANGS
        .iter()
        .map(|l| {
            let scope = reward_service::service::scope(&format!("{tag}-{l}"), "rain");
            (scope, 1_000_000_000_000)
        })
        .collect();
    let setup = rt
        .block_on(setup::prepare_run(
            &env,
            "clients",
            budgets,
            &temp_dir(&tag),
            &BTreeMap::new(),
            2,
        ))
        .unwrap();
    // A reward answered as stored whose event died with a killed agent is credited by
    // the sweeper once this grace has passed.
    let pipeline = rt
        .block_on(Pipeline::start(&env, &setup, setup::HOST_KILL_GRACE_MS))
        .unwrap();
    let keys = std::fs::read_to_string(setup.keys_file()).unwrap();
    let keys = keys.trim();
    let out = setup.dir.join("clients");

    let mut sent = String::new();
    let mut benches = Vec::new();
    let mut samples = Vec::new();
    for lang in LANGS {
        let (answered, bench) = run_client(lang, &setup, &tag, keys, &out);
        samples.push((
            lang,
            answered[0].user_id.clone(),
            answered[0].activity_id.clone(),
            answered[0].token.clone(),
        ));
        for a in answered {
            sent.push_str(&a.line);
            sent.push('\n');
        }
        benches.extend(bench);
    }
    for b in &benches {
        println!(
            "client bench {:<10} {} rewards, {} senders: {:.0}/s, call p50 {:.2} ms, p99 {:.2} ms",
            b["lang"].as_str().unwrap_or("?"),
            b["rewards"],
            b["concurrency"],
            b["rate"].as_f64().unwrap_or(0.0),
            b["p50_ms"].as_f64().unwrap_or(0.0),
            b["p99_ms"].as_f64().unwrap_or(0.0),
        );
    }
    std::fs::write(setup.dir.join("sent.tsv"), &sent).unwrap();

    // Every answered reward credited (the consumers, or the sweeper after its grace),
    // then the books checked as a whole.
    let until = Instant::now() + Duration::from_secs(180);
    let books = loop {
        let r = rt
            .block_on(loadtest::reconcile::run_patiently(&setup.dir))
            .unwrap();
        if r.credited >= r.sent || Instant::now() > until {
            break r;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    // A token from each language, legal and credited in the wallet API.
    let wallet = std::fs::read_to_string(setup.wallet_credential_file()).unwrap();
    let url = format!("http://{}/v1/tokens/validate", pipeline.http_addr());
    for (lang, user, activity, token) in &samples {
        let v: serde_json::Value = rt.block_on(async {
            reqwest::Client::new()
                .post(&url)
                .bearer_auth(wallet.trim())
                .json(&serde_json::json!({"user_id": user, "activity_id": activity, "tokens": [token]}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        });
        assert_eq!(
            (
                v["results"][0]["validity"].as_str(),
                v["results"][0]["credited"].as_bool()
            ),
            (Some("legal"), Some(true)),
            "{lang}: the wallet API on a token the client was answered: {v}"
        );
    }
    rt.block_on(pipeline.stop(Duration::from_secs(30)));
    println!("{}", books.table());
    assert!(
        books.passed(),
        "the clients' books do not balance (run directory {}):\n{}",
        setup.dir.display(),
        books.table()
    );
    assert_eq!(
        (books.sent, books.credited),
        (sent.lines().count() as u64, sent.lines().count() as u64),
        "every answered reward credited once"
    );
}
