//! Prometheus finds a run's processes: while a replay runs, it lists every process it
//! started (the reward services, the consumers, itself) in the stack Prometheus's
//! file-based discovery directory, and takes the lists away before it stops them.
//!
//! `ops/stack up` runs Debian's Prometheus from `$REWARD_STACK_DIR/prometheus/`
//! (`ops/prometheus/prometheus.yml`, its rules, a metrics credential `metrics.token`
//! and `targets/`). When that directory is there, a replay:
//!
//! - gives its reward services that credential for `/metrics`
//!   (`REWARD_METRICS_TOKEN_FILE`), and scrapes them with it itself;
//! - serves its own metrics (the in-process SDK's) on a loopback port, when
//!   `--metrics-addr` did not name one;
//! - writes `targets/<run>-<pid>.service.json` (scraped with the credential) and
//!   `targets/<run>-<pid>.open.json` (consumers, itself) every second from the
//!   processes running now, so a restarted consumer on a new port is followed, with
//!   the labels `component` (`service`, `consumer`, `loadtest`), `process` and `run`;
//! - starts the schedule only once Prometheus has scraped every listed process (at
//!   most [`PROMETHEUS_WAIT`] after they are up), so every counter's first sample is
//!   taken before the first call: a rate cannot see what a series did before its
//!   first sample;
//! - removes them before it stops its processes, so Prometheus does not count a
//!   process stopped on purpose as down. Lists a crashed replay left behind (their
//!   pid no longer alive) are removed by the next replay.
//!
//! Without that directory nothing of this happens (the replay runs as before).
//!
//! Not listed: `--sdk-hosts` child processes (they serve no metrics), so a run with
//! SDK hosts has the SDK's SLO recordings only from what the reward services' and
//! consumers' own SDKs send, not from the hosts' calls.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::children::{Services, http_addr};
pub use super::prometheus_dir::StackPrometheus;

/// The longest a run waits for Prometheus to scrape its processes before its traffic,
/// once more after the drain, and again for it to drop them after their lists are
/// gone (its discovery passes changes on every 5 s, and it scrapes every 2 s).
const PROMETHEUS_WAIT: Duration = Duration::from_secs(15);

/// A run's published target lists.
#[derive(Debug)]
pub(super) struct Published {
    run: String,
    files: [PathBuf; 2],
    /// True once the lists are taken away: the writer checks it under this lock
    /// before each write, so a write in flight never brings them back.
    withdrawn: Arc<std::sync::Mutex<bool>>,
    stop: tokio::sync::watch::Sender<bool>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Published {
    /// Starts publishing `services` (and this process's own metrics at `own`) as run
    /// `run`, rewriting the lists every second while they change.
    pub(super) fn start(
        prom: &StackPrometheus,
        run: &str,
        services: Arc<tokio::sync::Mutex<Services>>,
        own: Option<SocketAddr>,
    ) -> Self {
        let targets = prom.targets();
        remove_orphans(&targets);
        let stem = format!(
            "{run}-{}-{}",
            std::process::id(),
            start_time(std::process::id())
        );
        let files = [
            targets.join(format!("{stem}.service.json")),
            targets.join(format!("{stem}.open.json")),
        ];
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let (paths, run, run_label) = (files.clone(), run.to_string(), run.to_string());
        let withdrawn = Arc::new(std::sync::Mutex::new(false));
        let gate = withdrawn.clone();
        let task = tokio::spawn(async move {
            let mut last = (String::new(), String::new());
            loop {
                let now = {
                    let s = services.lock().await;
                    lists(&s, own, &run)
                };
                if now != last {
                    let Ok(gone) = gate.lock() else { break };
                    if *gone {
                        break;
                    }
                    let written = write_atomic(&paths[0], &now.0)
                        .and_then(|()| write_atomic(&paths[1], &now.1));
                    drop(gone);
                    match written {
                        Ok(()) => last = now,
                        Err(e) => eprintln!("replay: cannot write Prometheus targets: {e}"),
                    }
                }
                tokio::select! {
                    _ = stopped.wait_for(|s| *s) => break,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        });
        Self {
            run: run_label,
            withdrawn,
            files,
            stop,
            task: std::sync::Mutex::new(Some(task)),
        }
    }

    /// Waits until Prometheus has scraped every process the run lists, after this
    /// call began (so after the services, the consumers and the SDK are up, and
    /// before any traffic). `rate` and `increase` take a series' first sample as
    /// their baseline: a process first scraped seconds into a run hides those
    /// seconds from every rate, alert and panel over it (in a 15 s replay on a busy
    /// machine that was a third of its calls, and all of its slow start). Ends after
    /// [`PROMETHEUS_WAIT`] (said on stderr).
    pub(super) async fn scraped_before_traffic(&self) {
        let asked = unix_secs();
        let files = self.files.clone();
        // `timestamp` of a bare selector is each sample's own time; `and` keeps the
        // targets whose latest scrape, after `asked`, succeeded.
        let scraped = format!(
            "count(timestamp(up{{run=\"{run}\"}}) >= {asked} and up{{run=\"{run}\"}} == 1)",
            run = self.run
        );
        if query("vector(1)").await.is_none() {
            eprintln!("replay: the stack's Prometheus does not answer; it will not see this run");
            return;
        }
        let ready = wait_for(|| {
            let listed: usize = files.iter().map(|f| listed_targets(f)).sum();
            let scraped = scraped.clone();
            async move {
                if listed == 0 {
                    return None;
                }
                let n = query_number(&scraped).await?;
                (n >= listed as f64).then_some(())
            }
        })
        .await;
        if ready.is_none() {
            eprintln!(
                "replay: Prometheus had not scraped every process of the run within {} s of their start; its rates may miss the run's first seconds",
                PROMETHEUS_WAIT.as_secs()
            );
        }
    }

    /// Waits until Prometheus has scraped every listed process once more (so its
    /// last samples come after the drain and its counters agree with the run's
    /// report), stops publishing, removes the lists, and waits until Prometheus has
    /// dropped the targets, so the processes stopped next are never scraped as down.
    /// Each wait ends after [`PROMETHEUS_WAIT`] (said on stderr).
    pub(super) async fn withdraw(&self) {
        let asked = unix_secs();
        let scraped = format!("min(timestamp(up{{run=\"{}\"}}))", self.run);
        let fresh = wait_for(|| async {
            let t = query_number(&scraped).await?;
            (t >= asked).then_some(())
        })
        .await;
        if fresh.is_none() {
            eprintln!(
                "replay: Prometheus did not scrape the run's processes again within {} s; its last figures may miss the end of the run",
                PROMETHEUS_WAIT.as_secs()
            );
        }
        let _ = self.stop.send(true);
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = task {
            let _ = t.await;
        }
        self.remove();
        let run = self.run.clone();
        let gone = wait_for(|| {
            let run = run.clone();
            async move {
                let v = api("/api/v1/targets?state=active").await?;
                let listed = v["data"]["activeTargets"]
                    .as_array()?
                    .iter()
                    .any(|t| t["labels"]["run"] == run.as_str());
                (!listed).then_some(())
            }
        })
        .await;
        if gone.is_none() {
            eprintln!(
                "replay: Prometheus still scrapes the run's processes after {} s; stopping them may count as down",
                PROMETHEUS_WAIT.as_secs()
            );
        }
    }
}

/// Polls `check` every 250 ms until it answers, for at most [`PROMETHEUS_WAIT`].
async fn wait_for<F, Fut>(mut check: F) -> Option<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    let until = tokio::time::Instant::now() + PROMETHEUS_WAIT;
    loop {
        if check().await.is_some() {
            return Some(());
        }
        if tokio::time::Instant::now() >= until {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A GET of the stack Prometheus's API (`REWARD_PROMETHEUS_PORT`, else the address
/// book's port), as JSON; `None` when it does not answer.
async fn api(path: &str) -> Option<serde_json::Value> {
    let port = std::env::var("REWARD_PROMETHEUS_PORT")
        .ok()
        .and_then(|p| p.parse::<u16>().ok())
        .unwrap_or_else(|| reward_stack::env::default_port("PROMETHEUS_PORT"));
    let body = super::children::scrape(&format!("http://127.0.0.1:{port}{path}"), None)
        .await
        .ok()?;
    serde_json::from_str(&body).ok()
}

/// An instant query.
async fn query(expr: &str) -> Option<serde_json::Value> {
    let encoded: String = expr
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    api(&format!("/api/v1/query?query={encoded}")).await
}

/// The value of an instant query's first series; `None` when Prometheus does not
/// answer or the query has no series.
async fn query_number(expr: &str) -> Option<f64> {
    let v = query(expr).await?;
    v["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|s| s.parse::<f64>().ok())
}

fn unix_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A process's start time (clock ticks since boot, `/proc/PID/stat` field 22): with
/// the pid, names one process even when pids are reused. 0 when unreadable.
fn start_time(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // Fields after the parenthesised command name (which may hold spaces).
            let rest = s.rsplit_once(')')?.1;
            rest.split_whitespace().nth(19)?.parse().ok()
        })
        .unwrap_or(0)
}

impl Published {
    /// Marks the lists withdrawn and removes them (under the writer's lock).
    fn remove(&self) {
        let mut gone = self
            .withdrawn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *gone = true;
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

impl Drop for Published {
    /// A run that ends on an error takes its lists away too.
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().ok().and_then(|mut t| t.take()) {
            t.abort();
        }
        self.remove();
    }
}

/// The two file-discovery lists (service; consumers and this process) as JSON.
fn lists(s: &Services, own: Option<SocketAddr>, run: &str) -> (String, String) {
    let group = |addr: String, component: &str, process: &str| {
        serde_json::json!({
            "targets": [addr],
            "labels": {"component": component, "process": process, "run": run},
        })
    };
    let services: Vec<_> = s
        .services
        .iter()
        .filter_map(|c| http_addr(&c.ready).map(|a| group(a, "service", &c.spec.name)))
        .collect();
    let mut open: Vec<_> = s
        .consumers
        .iter()
        .filter_map(|c| http_addr(&c.ready).map(|a| group(a, "consumer", &c.spec.name)))
        .collect();
    if let Some(a) = own {
        open.push(group(a.to_string(), "loadtest", "loadtest"));
    }
    (
        serde_json::Value::Array(services).to_string(),
        serde_json::Value::Array(open).to_string(),
    )
}

/// The targets a list file names (0 when it is not there yet or not a list).
fn listed_targets(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| {
            v.as_array().map(|groups| {
                groups
                    .iter()
                    .filter_map(|g| g["targets"].as_array().map(Vec::len))
                    .sum()
            })
        })
        .unwrap_or(0)
}

/// Writes `path` whole or not at all (Prometheus may read it at any moment).
fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Removes the lists of replays that are no longer running (their pid, the last
/// `-` part of the file's stem, is not alive).
fn remove_orphans(targets: &Path) {
    let Ok(entries) = std::fs::read_dir(targets) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(stem) = name
            .strip_suffix(".service.json")
            .or_else(|| name.strip_suffix(".open.json"))
        else {
            continue;
        };
        // `<run>-<pid>-<start time>`: alive only if that pid is the same process.
        let mut parts = stem.rsplit('-');
        let started = parts.next().and_then(|t| t.parse::<u64>().ok());
        let pid = parts.next().and_then(|p| p.parse::<u32>().ok());
        let alive = match (pid, started) {
            (Some(pid), Some(t)) => start_time(pid) == t && t != 0,
            _ => false,
        };
        if !alive {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orphans_of_dead_replays_go_and_live_ones_stay() {
        let dir = std::env::temp_dir().join(format!("discovery-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let me = std::process::id();
        let live = dir.join(format!("run-a-{me}-{}.open.json", start_time(me)));
        let dead = dir.join("run-b-4294967-5.service.json");
        let reused = dir.join(format!("run-c-{me}-{}.open.json", start_time(me) + 1));
        let other = dir.join("static.json");
        for f in [&live, &dead, &reused, &other] {
            std::fs::write(f, "[]").unwrap();
        }
        remove_orphans(&dir);
        assert!(live.exists());
        assert!(!dead.exists());
        assert!(!reused.exists(), "a pid now running another process");
        assert!(other.exists(), "files not ours are left alone");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
