//! What the pipeline's tests share, so each test file says only what it tests. Used
//! as a dev-dependency only: nothing here ships in a service or the SDK.
//!
//! - this module: the local stack's addresses, checked (a test that needs a server
//!   and finds none fails loudly with the command that starts it, never skips),
//!   unique names and directories, the repository root, running a command, a test
//!   reward event.
//! - [`readback`]: reading back what reached a Kafka or RocketMQ topic, counted by
//!   trade number (every one at least once, duplicates, undecodable messages).
//! - [`wait`]: waiting for a condition instead of sleeping ([`eventually`], its
//!   blocking twin [`eventually_blocking`]): returns the moment a probe succeeds, fails
//!   with what was awaited and the probe's last answer.
//! - [`browser`]: a headless Chromium driven over WebDriver.
//! - [`private_redis`]: a `redis-server` of a test's own, to hang or stop.
//! - [`rates`]: the ceiling a rate limit promises on any machine.
//! - [`sdk_configs`]: SDK configurations several crates' tests start from.
//! - [`stack_lock`]: who may use a shared server while a test disrupts it, across
//!   threads and test binaries (`ops/test` runs several binaries at once).
//!
//! Topic creation and the stack's Kafka client settings are in `reward_stack`
//! (the load tester needs them too); starting services in-process is in each crate's
//! own test module, next to what it tests.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure is a panic

pub mod browser;
pub mod private_redis;
pub mod rates;
pub mod readback;
pub mod sdk_configs;
pub mod stack_lock;
pub mod wait;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use reward_stack::env::StackEnv;
pub use wait::{Probe, TimedOut, eventually, eventually_blocking, try_eventually};

/// The grant credential (gRPC, `/metrics`) test services run with.
pub const CREDENTIAL: &str = "test-credential-0123456789";
/// The wallet credential (wallet HTTP routes) test services run with.
pub const WALLET_CREDENTIAL: &str = "test-wallet-credential-0123456789";
/// The admin credential test services take (the `BudgetAdmin` API).
pub const ADMIN_CREDENTIAL: &str = "test-admin-credential-0123456789";

/// The Redis address to probe (a cluster's first node).
fn redis_addr(env: &StackEnv) -> String {
    env.redis_host_port()
        .unwrap_or_else(|e| panic!("REDIS_URL: {e}"))
}

fn reachable(what: &str, addr: &str) {
    use std::net::{TcpStream, ToSocketAddrs};
    let ok = addr
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok());
    assert!(
        ok,
        "{what} at {addr} is not answering; start the local stack with `ops/stack up` \
         (and `eval \"$(ops/stack env)\"` for non-default ports)"
    );
}

/// A reward event of activity `cny`, scene `rain` (the scene test services budget).
pub fn event(trade_no: &str, user: &str, reward_type: &str, amount: i64) -> proto::v1::RewardEvent {
    proto::v1::RewardEvent {
        trade_no: trade_no.into(),
        user: Some(proto::v1::UserInfo {
            user_id: user.into(),
            ..Default::default()
        }),
        activity_id: "cny".into(),
        scene_id: "rain".into(),
        reward_type: reward_type.into(),
        amount,
        created_at_ms: now_ms(),
        ..Default::default()
    }
}

/// Milliseconds since the epoch, as the SDK stamps `created_at_ms`.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The stack's Redis URL; panics (never skips) if Redis is down.
pub fn redis_url() -> String {
    let env = StackEnv::from_env();
    reachable("Redis", &redis_addr(&env));
    env.redis_url
}

/// The stack's addresses (`ops/stack env`, else the loopback defaults); panics (never
/// skips) if Redis, the Kafka broker or the RocketMQ name server is down.
pub fn stack() -> StackEnv {
    let env = StackEnv::from_env();
    reachable("Redis", &redis_addr(&env));
    reachable(
        "Kafka broker",
        env.kafka_brokers.split(',').next().unwrap_or_default(),
    );
    reachable("RocketMQ name server", &env.rocketmq_namesrv);
    env
}

/// The stack's Redis Cluster (3 primaries + 3 replicas on loopback), started here if it
/// is not running (`REWARD_REDIS_TOPOLOGY=cluster ops/stack up`, idempotent): its
/// `redis-cluster://` URL. Panics (never skips) if it cannot be started.
pub fn cluster_url() -> String {
    let up = std::process::Command::new(repo().join("ops/stack"))
        .arg("up")
        .env("REWARD_REDIS_TOPOLOGY", "cluster")
        .output()
        .unwrap_or_else(|e| panic!("ops/stack up: {e}"));
    assert!(
        up.status.success(),
        "REWARD_REDIS_TOPOLOGY=cluster ops/stack up failed: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    String::from_utf8_lossy(&up.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("REDIS_URL="))
        .map(|u| u.trim_matches('\'').to_string())
        .filter(|u| u.starts_with("redis-cluster://"))
        .unwrap_or_else(|| panic!("ops/stack up printed no cluster REDIS_URL"))
}

/// Whether this run is the perf tier (`ops/test perf` sets `REWARD_TEST_PERF=1`):
/// the speed promises (a replay's SLOs and validity, a rate reaching its target) are
/// asserted there, on a quiet machine. The correctness tiers assert outcomes only and
/// print those figures.
pub fn perf_tier() -> bool {
    std::env::var("REWARD_TEST_PERF").is_ok_and(|v| v == "1")
}

/// `prefix` and eight random hex digits: a name no other test run uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}{:08x}", rand::random::<u32>())
}

/// A fresh, empty directory under the system temp dir, named [`unique`]ly.
pub fn temp_dir(prefix: &str) -> PathBuf {
    let d = std::env::temp_dir().join(unique(&format!("{prefix}-")));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The repository's root (where `ops/`, `docs/` and `loadtest/profiles/` are): the
/// nearest directory above the test's working directory (cargo runs tests in their
/// package's folder) that holds `ops/stack`. Found at run time, not compiled in: a
/// shared target directory can hold this crate built from a checkout elsewhere.
pub fn repo() -> PathBuf {
    let start = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    start
        .ancestors()
        .find(|d| d.join("ops/stack").is_file() && d.join("Cargo.toml").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| {
            panic!(
                "no repository (a folder with ops/stack) above {}",
                start.display()
            )
        })
}

/// Runs `cmd` to its end: its exit code (-1 when killed) and stdout then stderr.
pub fn output(cmd: &mut std::process::Command) -> (i32, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Runs the test `test` of this test binary again as a child process with `env`, reads
/// its stdout until a line starting with `marker`, then kills it with SIGKILL: a crash
/// at a known point (the child prints the marker once it holds what should survive).
/// Answers that line, or `None` if the child ended without printing it. Blocking: call
/// it from `spawn_blocking` in an async test.
pub fn kill_self_at(test: &str, env: &[(&str, &str)], marker: &str) -> Option<String> {
    use std::io::BufRead as _;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let line = std::io::BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with(marker));
    child.kill().unwrap(); // SIGKILL: what the child held in memory is gone
    let _ = child.wait();
    line
}
