//! The reward service and consumers of a run as child processes: their specs, their
//! start (with the wait for Kafka partitions), their counters, final metrics and stop.

use super::links::Links;
use crate::faults::Link;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::services::{Child, Spec};
use crate::setup::{self, Broker, Setup};
use reward_stack::env::StackEnv;

use super::ReplayOptions;

pub(super) struct Services {
    /// The reward service instances, in index order (`kill-service` index).
    pub(super) services: Vec<Child>,
    pub(super) consumers: Vec<Child>,
}

/// The run's child processes by role (for [`crate::cost`]).
pub(super) fn procs(s: &Services) -> Vec<crate::cost::Proc> {
    let role = |list: &[Child], name: &str| {
        list.iter()
            .filter_map(|c| c.pid().map(|p| (name.to_string(), p)))
            .collect::<Vec<_>>()
    };
    let mut all = role(&s.services, "reward service");
    all.extend(role(&s.consumers, "consumers"));
    all
}

/// The key under which the per-second samples keep the sweeper's grants.
pub(super) const SWEPT: &str = "sweeper_granted";

/// Each running service instance's `reward_service_sweeper_entries_total{result=
/// "granted"}` (by instance name), scraped from its /metrics; an instance that does
/// not answer is left out.
pub(super) async fn sweeper_granted(
    services: &tokio::sync::Mutex<Services>,
    credential: Option<&str>,
) -> BTreeMap<String, u64> {
    let urls: Vec<(String, String)> = services
        .lock()
        .await
        .services
        .iter()
        .map(|s| (s.spec.name.clone(), metrics_url(&s.ready)))
        .collect();
    let mut out = BTreeMap::new();
    for (name, url) in urls {
        let Ok(text) = scrape(&url, credential).await else {
            continue;
        };
        let granted = text
            .lines()
            .filter(|l| {
                l.starts_with("reward_service_sweeper_entries_total")
                    && l.contains("result=\"granted\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
        out.insert(name, granted as u64);
    }
    out
}

/// The credential the service's /metrics asks for: the stack Prometheus's metrics
/// credential when the stack runs one (the services are given it), else the grant
/// credential.
pub(super) fn credential(setup: &Setup) -> Option<String> {
    if let Some(p) = super::prometheus_dir::StackPrometheus::find() {
        return p.token();
    }
    std::fs::read_to_string(setup.credential_file())
        .map(|t| t.trim().to_string())
        .ok()
}

/// `host:port` of a child's `/metrics` (from its ready line).
pub(super) fn http_addr(ready: &str) -> Option<String> {
    let url = metrics_url(ready);
    let addr = url.strip_prefix("http://")?.split('/').next()?;
    (!addr.is_empty()).then(|| addr.to_string())
}

/// Consumers' counters, read from their stats files (summed over members and
/// restarts: each start writes its own file).
pub(super) fn consumer_counters(dir: &Path) -> BTreeMap<String, u64> {
    let mut sum = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return sum;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.ends_with(".stats.json") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        if let Some(stats) = v.get("stats").and_then(|s| s.as_object()) {
            for (k, v) in stats {
                *sum.entry(k.clone()).or_default() += v.as_u64().unwrap_or(0);
            }
        }
    }
    sum
}

/// The `/metrics` URL in a child's ready line (`... metrics on http://A/metrics`, or
/// the service's `... HTTP on A`).
fn metrics_url(ready: &str) -> String {
    if let Some((_, url)) = ready.split_once("metrics on ") {
        return url.trim().to_string();
    }
    match ready.split_once("HTTP on ") {
        Some((_, addr)) => format!("http://{}/metrics", addr.trim()),
        None => String::new(),
    }
}

/// GET of a loopback `http://host:port/path` URL (HTTP/1.0, body returned on 200),
/// with a bearer credential when one is given (the reward service's `/metrics`).
pub async fn scrape(url: &str, bearer: Option<&str>) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("not an http:// URL: {url:?}"))?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut conn =
        tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(host))
            .await
            .map_err(|_| anyhow::anyhow!("connect to {host} timed out"))??;
    let auth = bearer.map_or(String::new(), |b| format!("Authorization: Bearer {b}\r\n"));
    conn.write_all(format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n{auth}\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut buf))
        .await
        .map_err(|_| anyhow::anyhow!("reading {url} timed out"))??;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("{url}: not an HTTP answer"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        anyhow::bail!("{url}: {}", head.lines().next().unwrap_or_default());
    }
    Ok(body.to_string())
}

/// Waits until every Kafka member's stats file says it holds partitions: a member
/// reports itself started before the group has assigned it anything (a group
/// rebalance takes seconds), and rewards sent meanwhile would wait
/// in the topic and show up as end-to-end latency that is only start-up.
pub(super) async fn wait_assigned(dir: &Path, members: u32) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut ready = 0;
        for i in 0..members {
            let path = dir.join(format!("consumer-kafka-{i}-1.stats.json"));
            let assigned = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|v| v.get("assigned").and_then(serde_json::Value::as_u64))
                .unwrap_or(0);
            if assigned > 0 {
                ready += 1;
            }
        }
        if ready == members {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "only {ready} of {members} Kafka consumers were assigned partitions within 90 s (see their logs in {})",
                dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(super) fn consumer_spec(
    setup: &Setup,
    env: &StackEnv,
    broker: Broker,
    index: u32,
    grpc: &str,
    start: u32,
) -> anyhow::Result<Spec> {
    let name = match broker {
        Broker::Kafka => format!("consumer-kafka-{index}"),
        Broker::Rocketmq => format!("consumer-rocketmq-{index}"),
    };
    let config = setup.dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        setup::consumer_toml(env, setup, broker, index, grpc),
    )?;
    Ok(Spec {
        name: name.clone(),
        program: crate::services::bin_dir().join("reward-consumer"),
        args: vec![
            "--config".into(),
            config.display().to_string(),
            "--stats-file".into(),
            setup
                .dir
                .join(format!("{name}-{start}.stats.json"))
                .display()
                .to_string(),
            "--progress-secs".into(),
            "5".into(),
            "--metrics-addr".into(),
            "127.0.0.1:0".into(),
        ],
        env: vec![(
            "REWARD_SERVICE_TOKEN_FILE".into(),
            setup.credential_file().display().to_string(),
        )],
        log: setup.dir.join(format!("{name}.log")),
        // Printed once the consumer has started and serves its metrics.
        ready_line: "reward-consumer: metrics on ".into(),
    })
}

/// A reward service of the run, `name`, with its config file written.
pub(super) fn service_spec(setup: &Setup, name: &str, config: &Path) -> Spec {
    let mut child_env = vec![
        (
            "REWARD_SERVICE_TOKEN_FILE".into(),
            setup.credential_file().display().to_string(),
        ),
        (
            "REWARD_WALLET_TOKEN_FILE".into(),
            setup.wallet_credential_file().display().to_string(),
        ),
    ];
    if let Some(p) = super::prometheus_dir::StackPrometheus::find() {
        // The stack's Prometheus scrapes /metrics with this credential.
        child_env.push((
            "REWARD_METRICS_TOKEN_FILE".into(),
            p.token_file().display().to_string(),
        ));
    }
    Spec {
        name: name.to_string(),
        program: crate::services::bin_dir().join("reward-service"),
        args: vec!["--config".into(), config.display().to_string()],
        env: child_env,
        log: setup.dir.join(format!("{name}.log")),
        ready_line: "reward-service: gRPC on ".into(),
    }
}

/// A started service's gRPC address (host:port), from its ready line.
pub(super) fn service_addr(service: &Child) -> String {
    service
        .ready
        .trim_start_matches("reward-service: gRPC on ")
        .split(',')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Starts the service and the consumers (every run has its own topics and key
/// prefixes, which only services started for it know) and waits until every Kafka
/// member holds partitions; returns them and the service's gRPC URL.
pub(super) async fn start(
    env: &StackEnv,
    setup: &Setup,
    opts: &ReplayOptions,
    double: Option<&reward_standins::downstream::DownstreamDouble>,
    links: &Links,
) -> anyhow::Result<(Services, String)> {
    let (services, grpc) = start_services(env, setup, opts, double, links).await?;
    wait_assigned(&setup.dir, opts.kafka_consumers).await?;
    Ok((services, grpc))
}

async fn start_services(
    env: &StackEnv,
    setup: &Setup,
    opts: &ReplayOptions,
    double: Option<&reward_standins::downstream::DownstreamDouble>,
    links: &Links,
) -> anyhow::Result<(Services, String)> {
    let config = setup.dir.join("service.toml");
    let urls = double.map(|w| links.wallet_urls(w));
    std::fs::write(
        &config,
        setup::service_toml(
            &links.env_for(env, Link::ServiceRedis),
            setup,
            urls.as_ref().map(|(u, s)| (u.as_str(), s.as_str())),
            if opts.sdk_hosts > 0 || crate::faults::token_writes_in_doubt(&opts.faults) {
                setup::HOST_KILL_GRACE_MS
            } else {
                reward_service::sweeper::SweepConfig::default().grace_ms
            },
        ),
    )?;
    let mut instances = Vec::new();
    let mut endpoints = Vec::new();
    for i in 0..opts.services.max(1) {
        let name = if i == 0 {
            "service".to_string()
        } else {
            format!("service-{i}")
        };
        let mut service =
            Child::start(service_spec(setup, &name, &config), Duration::from_secs(60)).await?;
        let addr = service_addr(&service);
        // A restart (kill-service) binds the same address, so the consumers' endpoint
        // list stays true.
        service
            .spec
            .env
            .push(("REWARD_SERVICE__SERVER__GRPC_ADDR".into(), addr.clone()));
        endpoints.push(format!("http://{addr}"));
        instances.push(service);
    }
    let grpc = endpoints.join(",");
    let mut consumers = Vec::new();
    for (broker, n) in [
        (Broker::Kafka, opts.kafka_consumers),
        (Broker::Rocketmq, opts.rocketmq_consumers),
    ] {
        for i in 0..n {
            let seen = links.env_for(env, Link::ConsumerRedis);
            let spec = consumer_spec(setup, &seen, broker, i, &grpc, 1)?;
            consumers.push(Child::start(spec, Duration::from_secs(90)).await?);
        }
    }
    Ok((
        Services {
            services: instances,
            consumers,
        },
        grpc,
    ))
}

/// Saves every process's final metrics, then stops the consumers and the service
/// gracefully (holding the lock throughout); returns the consumers' final counters.
pub(super) async fn stop(
    services: &tokio::sync::Mutex<Services>,
    setup: &Setup,
    dir: &Path,
    metrics: Option<&reward_runtime::admin::PrometheusHandle>,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut s = services.lock().await;
    save_metrics(&s, setup, dir, metrics).await?;
    stop_children(&mut s).await;
    Ok(consumer_counters(dir))
}

/// Each process's final metrics, before it stops (operators read them; the
/// tests check the counters against what was sent).
async fn save_metrics(
    s: &Services,
    setup: &Setup,
    dir: &Path,
    metrics: Option<&reward_runtime::admin::PrometheusHandle>,
) -> anyhow::Result<()> {
    let mut scrapes: Vec<(String, String, Option<String>)> = s
        .consumers
        .iter()
        .map(|c| (c.spec.name.clone(), metrics_url(&c.ready), None))
        .collect();
    // The service's /metrics takes its grant credential.
    let credential = credential(setup);
    for svc in &s.services {
        scrapes.push((
            svc.spec.name.clone(),
            metrics_url(&svc.ready),
            credential.clone(),
        ));
    }
    for (name, url, bearer) in scrapes {
        match scrape(&url, bearer.as_deref()).await {
            Ok(text) => std::fs::write(dir.join(format!("metrics-{name}.prom")), text)?,
            Err(e) => eprintln!("replay: cannot scrape {name} at {url}: {e}"),
        }
    }
    if let Some(h) = metrics {
        std::fs::write(dir.join("metrics-loadtest.prom"), h.render())?;
    }
    Ok(())
}

/// Stops the consumers, then the service, each within 30 s.
async fn stop_children(s: &mut Services) {
    for c in s.consumers.drain(..) {
        let name = c.spec.name.clone();
        if c.stop(Duration::from_secs(30)).await != Some(0) {
            eprintln!("replay: {name} did not stop cleanly (see its log)");
        }
    }
    for svc in s.services.drain(..) {
        let name = svc.spec.name.clone();
        if svc.stop(Duration::from_secs(30)).await != Some(0) {
            eprintln!("replay: {name} did not stop cleanly (see {name}.log)");
        }
    }
}
