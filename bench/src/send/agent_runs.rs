//! The agent side of `reward-bench send --agent`: the same SDK config run inside a
//! `reward-agent` child process, called over its Unix socket by the Rust client
//! (`reward_agent::client`): single calls at full speed, batches at full speed, and the
//! paced latency run at the in-process run's rate. What the agent adds to a call is the
//! socket, HTTP/2 and protobuf on both sides, and a second process's scheduling.
//!
//! A run counts a reward only when the agent's own SDK reports its event delivered and
//! its token stored (its `/metrics`), as the in-process runs do with the SDK's counters.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use proto::v1::reward_agent_client::RewardAgentClient;
use proto::v1::send_reward_reply::Result as Answer;
use proto::v1::{SendRewardRequest, SendRewardsRequest, UserInfo};
use reward_baseline::figures::micros;
use reward_baseline::producer::rewards;
use reward_baseline::{Percentiles, RunError, Throughput};
use reward_stack::env::StackEnv;
use sdk::request::RewardRequest;
use sdk::token::KeyRing;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

use super::sdk_runs::{pace, sdk_toml};
use super::{BenchError, Paced, SdkSide};

/// A running agent child and a client on its socket.
struct AgentChild {
    child: tokio::process::Child,
    client: RewardAgentClient<Channel>,
    metrics_url: String,
    dir: PathBuf,
}

fn setup(what: impl std::fmt::Display) -> BenchError {
    RunError::Setup(what.to_string()).into()
}

/// `text` (a standalone SDK config) as the agent's `[sdk]` section.
fn embedded(text: &str) -> String {
    let mut out = String::from("[sdk]\n");
    for line in text.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("[[").filter(|_| t.ends_with("]]")) {
            out.push_str(&format!("[[sdk.{name}\n"));
        } else if let Some(name) = t.strip_prefix('[').filter(|_| t.ends_with(']')) {
            out.push_str(&format!("[sdk.{name}\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The agent binary, beside this one (one `cargo build --release --bins` makes both).
fn agent_bin() -> Result<PathBuf, BenchError> {
    let exe = std::env::current_exe().map_err(setup)?;
    let bin = exe
        .parent()
        .map(|d| d.join("reward-agent"))
        .ok_or_else(|| setup("no directory for the bench's executable"))?;
    if !bin.exists() {
        return Err(setup(format!(
            "{} is missing: build it with `cargo build --release --bins`",
            bin.display()
        )));
    }
    Ok(bin)
}

async fn start_agent(
    env: &StackEnv,
    side: &SdkSide<'_>,
    tag: &str,
    topic: &str,
) -> Result<AgentChild, BenchError> {
    let dir = std::env::temp_dir().join(format!("reward-{tag}-agent"));
    std::fs::create_dir_all(&dir).map_err(setup)?;
    let socket = dir.join("agent.sock");
    let config = dir.join("agent.toml");
    let text = format!(
        "[listen]\nsocket = {socket:?}\n[admin]\naddr = \"127.0.0.1:0\"\n[drain]\ntimeout_ms = 30000\n{}",
        embedded(&sdk_toml(env, side, tag, topic)),
        socket = socket.display().to_string(),
    );
    std::fs::write(&config, text).map_err(setup)?;
    let mut child = tokio::process::Command::new(agent_bin()?)
        .arg("--config")
        .arg(&config)
        .env(sdk::token::keyring::KEYS_ENV, KeyRing::random(1).to_text())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| setup(format!("reward-agent: {e}")))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| setup("reward-agent: no stdout"))?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(l)) = lines.next_line().await {
            if l.starts_with("reward-agent: serving on ") {
                return Some(l);
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .ok_or_else(|| setup("reward-agent did not serve within 60 s"))?;
    // Keep reading its stdout, so the agent never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let metrics_url = ready
        .split("admin on http://")
        .nth(1)
        .map(|a| a.trim().to_string())
        .ok_or_else(|| setup(format!("no admin address in {ready:?}")))?;
    let client = reward_agent::client::unix(&socket)
        .await
        .map_err(|e| setup(format!("the agent's socket: {e}")))?;
    Ok(AgentChild {
        child,
        client,
        metrics_url,
        dir,
    })
}

/// The sum of every series of `name` in the agent's `/metrics`.
async fn metric(addr: &str, name: &str) -> Result<f64, BenchError> {
    let mut conn = tokio::net::TcpStream::connect(addr).await.map_err(setup)?;
    conn.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .map_err(setup)?;
    let mut body = String::new();
    conn.read_to_string(&mut body).await.map_err(setup)?;
    Ok(body
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Waits until the agent's SDK has `want` events delivered and tokens stored; fails if
/// it spooled, logged or gave up a token write, or after `limit`.
async fn wait_delivered(
    a: &AgentChild,
    want: u64,
    run: &'static str,
    limit: Duration,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + limit;
    loop {
        let sent = metric(&a.metrics_url, "reward_sdk_sent_total").await?;
        let stored = metric(&a.metrics_url, "reward_sdk_tokens_stored_total").await?;
        let bad = metric(&a.metrics_url, "reward_sdk_spooled_total").await?
            + metric(&a.metrics_url, "reward_sdk_logged_total").await?
            + metric(&a.metrics_url, "reward_sdk_token_write_failures_total").await?;
        if bad > 0.0 {
            return Err(RunError::Incomplete {
                run,
                what: format!("{bad} events spooled or logged, or token writes failed"),
            }
            .into());
        }
        if sent >= want as f64 && stored >= want as f64 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(RunError::Incomplete {
                run,
                what: format!("{sent} of {want} delivered and {stored} stored within {limit:?}"),
            }
            .into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// SIGTERM; the agent must drain and exit 0.
async fn finish(mut a: AgentChild, run: &'static str) -> Result<(), BenchError> {
    if let Some(pid) = a.child.id() {
        let _ = tokio::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await;
    }
    let status = tokio::time::timeout(Duration::from_secs(60), a.child.wait())
        .await
        .map_err(|_| setup("the agent did not stop within 60 s"))?
        .map_err(setup)?;
    let _ = std::fs::remove_dir_all(&a.dir);
    if !status.success() {
        return Err(RunError::Incomplete {
            run,
            what: format!("the agent stopped with {status}: something was left"),
        }
        .into());
    }
    Ok(())
}

fn request(r: &RewardRequest) -> SendRewardRequest {
    SendRewardRequest {
        trade_no: r.trade_no.clone(),
        user: Some(UserInfo {
            user_id: r.user.user_id.clone(),
            device_id: r.user.device_id.clone(),
            app_id: r.user.app_id.clone(),
        }),
        activity_id: r.activity_id.clone(),
        scene_id: r.scene_id.clone(),
        reward_type: r.reward_type.clone(),
        amount: r.amount,
        description: r.description.clone(),
        extension: r.extension.clone().into_iter().collect(),
    }
}

/// One call; `Err` with the refusal unless issued (back-pressure: `Ok(false)`, retry).
async fn call_one(
    client: &mut RewardAgentClient<Channel>,
    req: SendRewardRequest,
) -> Result<bool, String> {
    let trade = req.trade_no.clone();
    match client.send_reward(req).await {
        Ok(reply) => match reply.into_inner().result {
            Some(Answer::Issued(_)) => Ok(true),
            Some(Answer::Error(e)) if e.code() == proto::v1::AgentErrorCode::Backpressure => {
                Ok(false)
            }
            Some(Answer::Error(e)) => Err(format!("{trade}: {:?} {}", e.code(), e.message)),
            None => Err(format!("{trade}: an empty reply")),
        },
        Err(s) => Err(format!("{trade}: {s}")),
    }
}

/// `concurrency` callers, each sending its share one reward per call (`batch` = 1) or
/// `batch` rewards per call; the clock stops when every event is delivered and every
/// token stored.
pub(super) async fn agent_run(
    env: &StackEnv,
    side: &SdkSide<'_>,
    tag: &str,
    topic: &str,
    reqs: Vec<RewardRequest>,
    concurrency: usize,
    batch: usize,
) -> Result<Throughput, BenchError> {
    let run = if batch > 1 { "agent-batch" } else { "agent" };
    let agent = start_agent(env, side, tag, topic).await?;
    let n = reqs.len() as u64;
    let concurrency = concurrency.max(1);
    let mut shares: Vec<Vec<SendRewardRequest>> = (0..concurrency).map(|_| Vec::new()).collect();
    for (i, r) in reqs.iter().enumerate() {
        shares[i % concurrency].push(request(r));
    }
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for share in shares {
        let mut client = agent.client.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(share.len());
            for chunk in share.chunks(batch.max(1)) {
                let t = Instant::now();
                if batch > 1 {
                    let mut todo: Vec<SendRewardRequest> = chunk.to_vec();
                    while !todo.is_empty() {
                        let reply = client
                            .send_rewards(SendRewardsRequest {
                                rewards: todo.clone(),
                            })
                            .await
                            .map_err(|s| format!("a batch: {s}"))?
                            .into_inner();
                        let mut again = Vec::new();
                        for (r, a) in todo.into_iter().zip(reply.replies) {
                            match a.result {
                                Some(Answer::Issued(_)) => {}
                                Some(Answer::Error(e))
                                    if e.code() == proto::v1::AgentErrorCode::Backpressure =>
                                {
                                    again.push(r);
                                }
                                other => return Err(format!("{}: {other:?}", r.trade_no)),
                            }
                        }
                        todo = again;
                    }
                } else {
                    for r in chunk {
                        while !call_one(&mut client, r.clone()).await? {
                            tokio::task::yield_now().await;
                        }
                    }
                }
                lat.push(micros(t.elapsed()));
            }
            Ok::<_, String>(lat)
        }));
    }
    let mut calls = Vec::with_capacity(n as usize);
    for t in tasks {
        match t.await {
            Ok(Ok(l)) => calls.extend(l),
            Ok(Err(e)) => {
                return Err(RunError::Incomplete {
                    run,
                    what: format!("the agent refused {e}"),
                }
                .into());
            }
            Err(e) => return Err(setup(format!("caller task: {e}"))),
        }
    }
    wait_delivered(&agent, n, run, Duration::from_secs(120)).await?;
    let elapsed = start.elapsed();
    finish(agent, run).await?;
    Ok(Throughput {
        events: n,
        elapsed,
        calls: Percentiles::of(&mut calls),
    })
}

/// The paced run through the agent: as the in-process paced run, one SendReward per
/// reward, each spawned when due.
pub(super) async fn agent_paced_run(
    env: &StackEnv,
    side: &SdkSide<'_>,
    tag: &str,
    topic: &str,
    rate: f64,
    secs: u64,
) -> Result<Paced, BenchError> {
    let agent = start_agent(env, side, tag, topic).await?;
    let total = ((rate * secs as f64) as u64).max(1);
    let reqs: Vec<SendRewardRequest> = rewards(tag, total).iter().map(request).collect();
    let client = agent.client.clone();
    let calls = pace(reqs, rate, move |r: SendRewardRequest| {
        let mut client = client.clone();
        async move {
            match call_one(&mut client, r).await {
                Ok(true) => Ok(()),
                Ok(false) => Err("back-pressure".to_string()),
                Err(e) => Err(e),
            }
        }
    })
    .await?;
    wait_delivered(
        &agent,
        calls.accepted(),
        "agent-paced",
        Duration::from_secs(120),
    )
    .await?;
    finish(agent, "agent-paced").await?;
    Ok(calls.report(rate, "agent paced run"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_in_process_config_embeds_as_the_agents_sdk_section() {
        let env = StackEnv::from_env();
        let kafka = std::collections::BTreeMap::from([("linger.ms".to_string(), "5".to_string())]);
        let side = SdkSide {
            kafka: &kafka,
            write_mode: "direct",
        };
        let text = format!(
            "[listen]\nsocket = \"/tmp/x/agent.sock\"\n{}",
            embedded(&sdk_toml(&env, &side, "t1", "topic-1"))
        );
        let cfg =
            reward_agent::AgentConfig::from_toml_str(&text, &[]).expect("a valid agent config");
        assert_eq!(cfg.sdk.store.key_prefix, "t1");
        assert_eq!(cfg.sdk.routing.queues["bench"].topic, "topic-1");
    }
}
