//! Fault injection during a run: each fault waits for its moment, then acts on the
//! downstream double, Redis, a stack server or a consumer, and is logged with its time.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::faults::{Action, Fault};
use crate::services::Child;
use crate::setup::{Broker, Setup};
use reward_stack::env::StackEnv;

use super::children::{Services, consumer_spec};

/// The faults injected so far.
pub(super) type FaultLog = Arc<std::sync::Mutex<Vec<super::recovery::Struck>>>;

/// What the faults act on, cloned into each fault's task.
#[derive(Clone)]
pub(super) struct Targets {
    pub(super) services: Arc<tokio::sync::Mutex<Services>>,
    pub(super) script: PathBuf,
    pub(super) setup: Setup,
    pub(super) env: StackEnv,
    pub(super) grpc: String,
    pub(super) double: Option<reward_standins::downstream::DownstreamDouble>,
    /// The fault proxies of the links the plan names.
    pub(super) links: Arc<super::links::Links>,
    pub(super) side: Arc<super::hosts::Side>,
    /// Held while a reshard moves slots and while a primary is being killed: a
    /// primary killed mid-reshard (the reshard's source or target) leaves slots
    /// half-moved, which no operator would do on purpose; on a busy machine a
    /// reshard can outlast the gap a plan leaves before its failover.
    pub(super) topology: Arc<tokio::sync::Mutex<()>>,
}

/// Injects every fault at its time, each as its own task, and waits for them all.
pub(super) async fn play(faults: Vec<Fault>, targets: Targets, log: FaultLog, start: Instant) {
    let mut handles = Vec::new();
    for f in faults {
        let targets = targets.clone();
        let log = log.clone();
        handles.push(tokio::spawn(play_one(f, targets, log, start)));
    }
    for h in handles {
        let _ = h.await;
    }
}

/// Waits for one fault's time, injects it, and logs it (with its failure, if any).
async fn play_one(f: Fault, t: Targets, log: FaultLog, start: Instant) {
    tokio::time::sleep_until((start + Duration::from_secs_f64(f.at_secs)).into()).await;
    let struck = std::sync::Mutex::new(Instant::now());
    let r = inject(&f, &t, &struck).await;
    let back_secs = start.elapsed().as_secs_f64();
    let struck_secs = struck
        .lock()
        .map_or(back_secs, |at| at.duration_since(start).as_secs_f64());
    let label = match &r {
        Ok(()) => f.label(),
        Err(e) => format!("{} FAILED: {e}", f.label()),
    };
    eprintln!(
        "replay: fault at {:.1} s: {label}",
        start.elapsed().as_secs_f64()
    );
    if let Ok(mut l) = log.lock() {
        l.push(super::recovery::Struck {
            failed: r.is_err(),
            label,
            struck_secs,
            back_secs,
        });
    }
}

/// Injects `f`; `struck` starts as the fault's due time, and a fault that first waits
/// (a failover behind a running reshard) moves it to when it really strikes.
async fn inject(f: &Fault, t: &Targets, struck: &std::sync::Mutex<Instant>) -> anyhow::Result<()> {
    let (services, script, setup, env) = (&t.services, t.script.as_path(), &t.setup, &t.env);
    let (grpc, double) = (t.grpc.as_str(), t.double.as_ref());
    let down = Duration::from_secs_f64(f.for_secs);
    match f.action {
        Action::DownstreamFail | Action::DownstreamSlow | Action::DownstreamTimeoutAfterCredit => {
            downstream(f, double, down).await
        }
        Action::RedisPause => redis_pause(env, down).await,
        Action::Latency
        | Action::Blackhole
        | Action::Reset
        | Action::DropAnswers
        | Action::Bandwidth => network(f, &t.links, down).await,
        Action::StopServer => {
            let server = f.server.as_deref().unwrap_or("kafka");
            crate::faults::stack(script, "stop", server).await?;
            tokio::time::sleep(down).await;
            crate::faults::stack(script, "start", server).await
        }
        Action::KillConsumer => {
            let seen = t.links.env_for(env, crate::faults::Link::ConsumerRedis);
            kill_consumer(f, services, setup, &seen, grpc, down).await
        }
        Action::KillService => kill_service(f, services, down).await,
        Action::KillSdkHost => match &*t.side {
            super::hosts::Side::Hosts(pool) => {
                let i = usize::try_from(f.index.unwrap_or(0)).unwrap_or(usize::MAX);
                pool.kill(i, down).await
            }
            super::hosts::Side::Local(_) => {
                anyhow::bail!("the SDK runs in the load tester's process (--sdk-hosts 0)")
            }
        },
        Action::StopBrokers => {
            crate::faults::stack(script, "stop", "kafka").await?;
            crate::faults::stack(script, "stop", "broker").await?;
            tokio::time::sleep(down).await;
            crate::faults::stack(script, "start", "kafka").await?;
            crate::faults::stack(script, "start", "broker").await
        }
        Action::RedisFailover => {
            let node = {
                let _topology = t.topology.lock().await;
                if let Ok(mut at) = struck.lock() {
                    *at = Instant::now();
                }
                crate::faults::stack_output(script, "kill-primary", "").await?
            };
            anyhow::ensure!(
                node.starts_with("cluster"),
                "ops/stack kill-primary named no node: {node:?}"
            );
            tokio::time::sleep(down).await;
            crate::faults::stack(script, "start", &node).await
        }
        Action::RedisReshard => {
            let slots = f.slots.unwrap_or(2000).to_string();
            let _topology = t.topology.lock().await;
            crate::faults::stack(script, "reshard", &slots).await
        }
    }
}

/// Kills a reward service instance hard (its batches in flight die with it), and
/// restarts it on the same address after `down`.
async fn kill_service(
    f: &Fault,
    services: &tokio::sync::Mutex<Services>,
    down: Duration,
) -> anyhow::Result<()> {
    let want = usize::try_from(f.index.unwrap_or(0)).unwrap_or(usize::MAX);
    let mut victim = {
        let mut s = services.lock().await;
        if want >= s.services.len() {
            anyhow::bail!("no service instance {want} running");
        }
        s.services.remove(want)
    };
    victim.kill_hard().await;
    tokio::time::sleep(down).await;
    let restarted = victim.restart(Duration::from_secs(60)).await?;
    let mut s = services.lock().await;
    let at = want.min(s.services.len());
    s.services.insert(at, restarted);
    Ok(())
}

/// The downstream double fails, slows or answers late for `down`, then recovers.
async fn downstream(
    f: &Fault,
    double: Option<&reward_standins::downstream::DownstreamDouble>,
    down: Duration,
) -> anyhow::Result<()> {
    let Some(w) = double else {
        anyhow::bail!("no downstream double running");
    };
    match f.action {
        Action::DownstreamFail => w.set_fail_share(f.share.unwrap_or(0.0)),
        Action::DownstreamSlow => {
            w.set_delay(Duration::from_millis(f.delay_ms.unwrap_or(0)));
        }
        _ => w.set_late_share(f.share.unwrap_or(1.0)),
    }
    tokio::time::sleep(down).await;
    match f.action {
        Action::DownstreamFail => w.set_fail_share(0.0),
        Action::DownstreamSlow => w.set_delay(Duration::ZERO),
        _ => w.set_late_share(0.0),
    }
    Ok(())
}

/// Switches the link's fault proxy to the fault's mode for `down`, then back to
/// passing bytes untouched.
async fn network(f: &Fault, links: &super::links::Links, down: Duration) -> anyhow::Result<()> {
    let link = f.link()?;
    let Some(proxy) = links.get(link) else {
        anyhow::bail!("no fault proxy on {}", link.name());
    };
    let Some(mode) = f.proxy_mode() else {
        anyhow::bail!("{} is not a network fault", f.label());
    };
    proxy.set(mode);
    tokio::time::sleep(down).await;
    proxy.set(faultproxy::Mode::Pass);
    Ok(())
}

/// Pauses every Redis client for `down`.
async fn redis_pause(env: &StackEnv, down: Duration) -> anyhow::Result<()> {
    // One connection of its own: the pausing client is not paused.
    let client =
        fred::prelude::Builder::from_config(fred::prelude::Config::from_url(&env.redis_url)?)
            .build()?;
    fred::interfaces::ClientLike::init(&client).await?;
    let ms = down.as_millis().to_string();
    let _: String = fred::interfaces::ClientLike::custom(
        &client,
        fred::types::CustomCommand::new_static("CLIENT", fred::types::ClusterHash::FirstKey, false),
        vec!["PAUSE", ms.as_str(), "ALL"],
    )
    .await?;
    tokio::time::sleep(down).await;
    let _ = fred::interfaces::ClientLike::quit(&client).await;
    Ok(())
}

/// Kills a Kafka consumer hard, and restarts it after `down`.
async fn kill_consumer(
    f: &Fault,
    services: &tokio::sync::Mutex<Services>,
    setup: &Setup,
    env: &StackEnv,
    grpc: &str,
    down: Duration,
) -> anyhow::Result<()> {
    let want = f.index.unwrap_or(0);
    let mut victim = {
        let mut s = services.lock().await;
        let name = format!("consumer-kafka-{want}");
        let Some(i) = s.consumers.iter().position(|c| c.spec.name == name) else {
            anyhow::bail!("no {name} running");
        };
        s.consumers.remove(i)
    };
    victim.kill_hard().await;
    tokio::time::sleep(down).await;
    let spec = consumer_spec(setup, env, Broker::Kafka, want, grpc, victim.starts + 1)?;
    let restarted = Child::start(spec, Duration::from_secs(90)).await;
    let mut restarted = restarted?;
    restarted.starts = victim.starts + 1;
    services.lock().await.consumers.push(restarted);
    Ok(())
}
