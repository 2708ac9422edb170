//! The reward service and the consumers as child processes of a replay.
//!
//! They run as the real binaries (`reward-service`, `reward-consumer`, found beside
//! the `loadtest` executable, so one `cargo build` provides all three), with configs
//! the replay writes into its run directory and secrets passed through files named in
//! the environment, never on the command line (where `ps` would show them). Each
//! child's stdout and stderr go to `<name>.log` in the run directory.
//!
//! Stopping is the binaries' own graceful path: SIGTERM (sent with `kill`, since the
//! standard library can only send SIGKILL), then a deadline, then SIGKILL. A fault
//! drill's "kill -9" is [`Child::kill_hard`].

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::oneshot;

/// Why a child could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The binary is not where it should be.
    #[error(
        "{0} not found: build the workspace first (`cargo test --workspace --no-run`, or `cargo build --release --bins` for figures)"
    )]
    Missing(PathBuf),
    /// Spawning failed.
    #[error("cannot start {name}: {source}")]
    Spawn {
        /// Which child.
        name: String,
        /// Why.
        source: std::io::Error,
    },
    /// It exited or stayed silent before saying it was ready.
    #[error("{name} did not come up within {secs} s (see {log})")]
    NotReady {
        /// Which child.
        name: String,
        /// How long we waited.
        secs: u64,
        /// Its log.
        log: String,
    },
}

/// The directory holding the workspace's binaries (the one `loadtest` runs from).
pub fn bin_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .map(|d| {
            // Test and bench executables live one level down, in `deps/`.
            if d.ends_with("deps") {
                d.parent().map_or(d.clone(), Path::to_path_buf)
            } else {
                d
            }
        })
        .unwrap_or_else(|| PathBuf::from("."))
}

/// How to start one child (kept to restart it after a kill).
#[derive(Debug, Clone)]
pub struct Spec {
    /// A name for logs and the report (`service`, `consumer-kafka-1`, …).
    pub name: String,
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its environment additions.
    pub env: Vec<(String, String)>,
    /// Its log file (appended to across restarts).
    pub log: PathBuf,
    /// A line prefix on stdout that says it is ready.
    pub ready_line: String,
}

/// A running child.
#[derive(Debug)]
pub struct Child {
    /// How it was started.
    pub spec: Spec,
    child: tokio::process::Child,
    /// The ready line it printed.
    pub ready: String,
    /// How many times it has been started.
    pub starts: u32,
}

impl Child {
    /// Starts `spec` and waits (up to `wait`) for its ready line.
    pub async fn start(spec: Spec, wait: Duration) -> Result<Self, ServiceError> {
        Self::start_nth(spec, wait, 1).await
    }

    async fn start_nth(spec: Spec, wait: Duration, starts: u32) -> Result<Self, ServiceError> {
        if !spec.program.is_file() {
            return Err(ServiceError::Missing(spec.program.clone()));
        }
        let spawn_err = |source| ServiceError::Spawn {
            name: spec.name.clone(),
            source,
        };
        let log = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .await
            .map_err(spawn_err)?;
        let mut child = Command::new(&spec.program)
            .args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(spawn_err)?;
        let (ready_tx, ready_rx) = oneshot::channel();
        let log = std::sync::Arc::new(tokio::sync::Mutex::new(log));
        if let Some(out) = child.stdout.take() {
            let log = log.clone();
            let prefix = spec.ready_line.clone();
            tokio::spawn(async move {
                let mut ready_tx = Some(ready_tx);
                let mut lines = BufReader::new(out).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.starts_with(&prefix)
                        && let Some(tx) = ready_tx.take()
                    {
                        let _ = tx.send(line.clone());
                    }
                    let mut f = log.lock().await;
                    let _ = f.write_all(line.as_bytes()).await;
                    let _ = f.write_all(b"\n").await;
                }
                let _ = log.lock().await.flush().await;
            });
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(async move {
                let mut lines = BufReader::new(err).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut f = log.lock().await;
                    let _ = f.write_all(line.as_bytes()).await;
                    let _ = f.write_all(b"\n").await;
                }
                let _ = log.lock().await.flush().await;
            });
        }
        let not_ready = || ServiceError::NotReady {
            name: spec.name.clone(),
            secs: wait.as_secs(),
            log: spec.log.display().to_string(),
        };
        let ready = match tokio::time::timeout(wait, ready_rx).await {
            Ok(Ok(line)) => line,
            _ => {
                let _ = child.start_kill();
                return Err(not_ready());
            }
        };
        Ok(Self {
            spec,
            child,
            ready,
            starts,
        })
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// SIGKILL, no goodbye (a crash drill); waits for the process to be gone.
    pub async fn kill_hard(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// Starts the same spec again (after [`Child::kill_hard`] or a stop).
    pub async fn restart(self, wait: Duration) -> Result<Self, ServiceError> {
        let starts = self.starts + 1;
        Self::start_nth(self.spec, wait, starts).await
    }

    /// SIGTERM, then up to `grace` for a clean exit, then SIGKILL. Returns the exit
    /// code (None if it had to be killed or was killed by a signal).
    pub async fn stop(mut self, grace: Duration) -> Option<i32> {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => {
                self.kill_hard().await;
                None
            }
        }
    }
}
