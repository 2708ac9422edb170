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
//! - removes them before it stops its processes, so Prometheus does not count a
//!   process stopped on purpose as down. Lists a crashed replay left behind (their
//!   pid no longer alive) are removed by the next replay.
//!
//! Without that directory nothing of this happens (the replay runs as before).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::children::{Services, http_addr};

/// One scrape interval of the stack's Prometheus (`ops/prometheus/prometheus.yml`)
/// and a margin: what a run waits before taking its processes off the lists.
const FINAL_SCRAPE: Duration = Duration::from_millis(2_500);

/// The stack's Prometheus directory, when `ops/stack up` made one.
#[derive(Debug, Clone)]
pub struct StackPrometheus {
    dir: PathBuf,
}

impl StackPrometheus {
    /// `$REWARD_STACK_DIR/prometheus` (default `/var/tmp/reward-stack`) when it holds
    /// a metrics credential and a targets directory.
    pub fn find() -> Option<Self> {
        let stack = std::env::var_os("REWARD_STACK_DIR")
            .map_or_else(|| PathBuf::from("/var/tmp/reward-stack"), PathBuf::from);
        let dir = stack.join("prometheus");
        (dir.join("metrics.token").is_file() && dir.join("targets").is_dir())
            .then_some(Self { dir })
    }

    /// The metrics credential's file (mode 0600).
    pub fn token_file(&self) -> PathBuf {
        self.dir.join("metrics.token")
    }

    /// The metrics credential.
    pub fn token(&self) -> Option<String> {
        std::fs::read_to_string(self.token_file())
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
    }

    fn targets(&self) -> PathBuf {
        self.dir.join("targets")
    }
}

/// A run's published target lists.
#[derive(Debug)]
pub(super) struct Published {
    files: [PathBuf; 2],
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
        let stem = format!("{run}-{}", std::process::id());
        let files = [
            targets.join(format!("{stem}.service.json")),
            targets.join(format!("{stem}.open.json")),
        ];
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let (paths, run) = (files.clone(), run.to_string());
        let task = tokio::spawn(async move {
            let mut last = (String::new(), String::new());
            loop {
                let now = {
                    let s = services.lock().await;
                    lists(&s, own, &run)
                };
                if now != last {
                    let written = write_atomic(&paths[0], &now.0)
                        .and_then(|()| write_atomic(&paths[1], &now.1));
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
            files,
            stop,
            task: std::sync::Mutex::new(Some(task)),
        }
    }

    /// Waits one scrape (the stack scrapes every 2 s), so Prometheus's last sample
    /// of every process is taken after the drain ended and its counters agree with
    /// the run's report; then stops publishing and removes the lists (Prometheus drops
    /// the targets at its next read of the directory).
    pub(super) async fn withdraw(&self) {
        tokio::time::sleep(FINAL_SCRAPE).await;
        let _ = self.stop.send(true);
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = task {
            let _ = t.await;
        }
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
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
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
        let alive = stem
            .rsplit('-')
            .next()
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
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
        let live = dir.join(format!("run-a-{}.open.json", std::process::id()));
        let dead = dir.join("run-b-4294967.service.json");
        let other = dir.join("static.json");
        for f in [&live, &dead, &other] {
            std::fs::write(f, "[]").unwrap();
        }
        remove_orphans(&dir);
        assert!(live.exists());
        assert!(!dead.exists());
        assert!(other.exists(), "files not ours are left alone");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
