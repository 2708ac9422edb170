//! The parent's pool of SDK hosts: launched, picked in turn, killed by a fault, buried
//! (its pending calls answered in doubt, its rewards marked), closed.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sdk::request::RewardRequest;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::sync::{mpsc, oneshot};

use crate::marks::{BOUND, MARKS};
use reward_runtime::catalogue::ANSWER_PATHS;
use reward_standins::sdk_host::{FromHost, HostStats, KINDS, Sent, WireRequest};

/// How long a killed host is started again while its starts fail (a supervisor's
/// patience): past a Redis outage and the reload of its append-only file.
const RESTART_FOR: Duration = Duration::from_secs(120);

/// What a host's reader saw.
#[derive(Default)]
pub(super) struct HostState {
    /// Calls sent, not answered: id -> (trade number, the caller).
    pub(super) pending: HashMap<u64, (String, oneshot::Sender<Sent>)>,
    /// Trade numbers this incarnation accepted, and what held each when it was
    /// answered: its mark in the hosts' marks file (`stored`, `queued`: its event
    /// acknowledged or spooled first, `accepted`: nothing yet).
    pub(super) accepted: Vec<(String, &'static str)>,
    /// Accepted since the last counters line.
    pub(super) accepted_since_stats: u64,
    /// The pipe ended: calls pending then are in doubt (trade numbers); no new call
    /// may be sent.
    pub(super) dead: bool,
    pub(super) in_doubt: Vec<String>,
    /// Its latest counters.
    pub(super) stats: HostStats,
    /// Its final counters, when it closed cleanly.
    pub(super) closed: Option<HostStats>,
}

/// One running SDK host (one incarnation of host `index`).
pub(super) struct Host {
    child: tokio::sync::Mutex<tokio::process::Child>,
    stdin: Mutex<Option<mpsc::UnboundedSender<String>>>,
    state: Arc<Mutex<HostState>>,
    reader: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// The SDK hosts of a run.
pub(crate) struct HostPool {
    exe: PathBuf,
    dir: PathBuf,
    configs: Vec<PathBuf>,
    hosts: Mutex<Vec<Option<Arc<Host>>>>,
    next: AtomicUsize,
    next_id: AtomicU64,
    /// The counters of hosts that are gone (killed or closed).
    gone: Mutex<HostStats>,
    /// `hosts.tsv`: the rewards of hosts that died.
    marks: Mutex<std::io::BufWriter<std::fs::File>>,
    /// Hosts killed so far.
    killed: AtomicU64,
    /// When the last killed host was running again.
    last_back: Mutex<Option<std::time::Instant>>,
    /// Killed hosts not yet running again.
    restarting: AtomicUsize,
}

impl HostPool {
    /// Starts `configs.len()` hosts, host `i` with the SDK config file `configs[i]`;
    /// their stderr goes to `dir/sdk-host<i>.log`.
    pub(crate) async fn start(dir: &Path, configs: Vec<PathBuf>) -> anyhow::Result<Self> {
        let exe = crate::services::bin_dir().join(reward_standins::sdk_host::BINARY);
        if !exe.is_file() {
            return Err(crate::services::ServiceError::Missing(exe).into());
        }
        let marks_path = dir.join(MARKS);
        let marks = std::fs::File::create(&marks_path)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", marks_path.display()))?;
        let pool = Self {
            exe,
            dir: dir.to_path_buf(),
            hosts: Mutex::new(vec![None; configs.len()]),
            configs,
            next: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            gone: Mutex::new(HostStats::default()),
            marks: Mutex::new(std::io::BufWriter::new(marks)),
            killed: AtomicU64::new(0),
            last_back: Mutex::new(None),
            restarting: AtomicUsize::new(0),
        };
        for i in 0..pool.configs.len() {
            pool.launch(i).await?;
        }
        Ok(pool)
    }

    /// Starts host `i` and puts it in the rotation once it answers (its first
    /// counters line).
    pub(super) async fn launch(&self, i: usize) -> anyhow::Result<()> {
        let log_path = self.dir.join(format!("sdk-host{i}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", log_path.display()))?;
        let mut child = tokio::process::Command::new(&self.exe)
            .arg("--config")
            .arg(&self.configs[i])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start SDK host {i}: {e}"))?;
        let (Some(mut child_in), Some(child_out)) = (child.stdin.take(), child.stdout.take())
        else {
            anyhow::bail!("SDK host {i} has no stdin/stdout");
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut next = Some(first);
                while let Some(line) = next {
                    if child_in.write_all(line.as_bytes()).await.is_err() {
                        return;
                    }
                    next = rx.try_recv().ok();
                }
                if child_in.flush().await.is_err() {
                    return;
                }
            }
        });
        let state = Arc::new(Mutex::new(HostState::default()));
        let (ready_tx, ready) = oneshot::channel();
        let reader = tokio::spawn(read_host(child_out, state.clone(), ready_tx));
        match tokio::time::timeout(Duration::from_secs(30), ready).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                let _ = child.kill().await;
                anyhow::bail!(
                    "SDK host {i} exited as it started (see {})",
                    log_path.display()
                );
            }
            Err(_) => {
                let _ = child.kill().await;
                anyhow::bail!(
                    "SDK host {i} did not start within 30 s (see {})",
                    log_path.display()
                );
            }
        }
        let host = Arc::new(Host {
            child: tokio::sync::Mutex::new(child),
            stdin: Mutex::new(Some(tx)),
            state,
            reader: tokio::sync::Mutex::new(Some(reader)),
        });
        if let Ok(mut hosts) = self.hosts.lock() {
            hosts[i] = Some(host);
        }
        Ok(())
    }

    /// The next live host, round robin.
    pub(super) fn pick(&self) -> Option<Arc<Host>> {
        let hosts = self.hosts.lock().ok()?;
        let n = hosts.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n).find_map(|k| {
            hosts[(start + k) % n]
                .clone()
                .filter(|h| h.state.lock().is_ok_and(|s| !s.dead))
        })
    }

    /// Sends one request through a live host.
    pub(crate) async fn send(&self, req: RewardRequest) -> Sent {
        let Some(host) = self.pick() else {
            return Sent::Refused("no_sdk_host");
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let trade = req.trade_no.clone();
        let Ok(line) = serde_json::to_string(&WireRequest::new(id, req)) else {
            return Sent::Refused("invalid");
        };
        let (tx, rx) = oneshot::channel();
        match host.state.lock() {
            // Once its pipe has ended nothing resolves a new call: refuse it.
            Ok(mut s) if !s.dead => {
                s.pending.insert(id, (trade, tx));
            }
            _ => return Sent::Refused("no_sdk_host"),
        }
        let queued = host
            .stdin
            .lock()
            .ok()
            .and_then(|s| s.as_ref().map(|s| s.send(line + "\n").is_ok()))
            .unwrap_or(false);
        if !queued {
            // Never reached the host, unless its reader already gave up on it (then
            // it is in doubt, and marked so).
            if let Ok(mut s) = host.state.lock()
                && s.pending.remove(&id).is_some()
            {
                return Sent::Refused("no_sdk_host");
            }
        }
        rx.await.unwrap_or(Sent::InDoubt)
    }

    /// The counters summed over every host, live and gone.
    pub(crate) fn stats(&self) -> HostStats {
        let mut sum = self.gone.lock().map(|g| g.clone()).unwrap_or_default();
        if let Ok(hosts) = self.hosts.lock() {
            for h in hosts.iter().flatten() {
                if let Ok(s) = h.state.lock() {
                    sum.add(&s.stats);
                }
            }
        }
        sum
    }

    /// Hosts killed so far.
    pub(crate) fn killed(&self) -> u64 {
        self.killed.load(Ordering::Relaxed)
    }

    /// When the last killed host was running again.
    pub(crate) fn last_back(&self) -> Option<std::time::Instant> {
        self.last_back.lock().ok().and_then(|t| *t)
    }

    /// SIGKILLs host `i` (what it held in memory dies with it), marks its rewards,
    /// and starts it again after `down`.
    pub(crate) async fn kill(&self, i: usize, down: Duration) -> anyhow::Result<()> {
        let host = {
            let mut hosts = self
                .hosts
                .lock()
                .map_err(|_| anyhow::anyhow!("host table poisoned"))?;
            match hosts.get_mut(i) {
                Some(slot) => slot.take(),
                None => anyhow::bail!("no SDK host {i} (the run has {})", hosts.len()),
            }
        };
        let Some(host) = host else {
            anyhow::bail!("SDK host {i} is down already");
        };
        // Counted until this ends, however it ends (a fault task dropped mid-way too).
        struct Restarting<'a>(&'a AtomicUsize);
        impl Drop for Restarting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.restarting.fetch_add(1, Ordering::Relaxed);
        let _restarting = Restarting(&self.restarting);
        self.kill_and_restart(i, host, down).await
    }

    /// Waits until every killed host is running again, or has failed to (its kill
    /// fault's error says so): what a dead host held is judged only once its
    /// successor could have replayed its spool.
    pub(crate) async fn back(&self) {
        while self.restarting.load(Ordering::Relaxed) > 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn kill_and_restart(
        &self,
        i: usize,
        host: Arc<Host>,
        down: Duration,
    ) -> anyhow::Result<()> {
        let killed = host.child.lock().await.kill().await;
        self.killed.fetch_add(1, Ordering::Relaxed);
        // Buried whatever the kill answered (it ended, or was already gone).
        self.bury(&host, i, true).await?;
        if let Err(e) = killed {
            anyhow::bail!("SDK host {i}: SIGKILL failed: {e}");
        }
        tokio::time::sleep(down).await;
        // As an activity service's supervisor does: a host whose start failed is
        // started again. An SDK starts only once its token store answers, so a host
        // killed while Redis is away (or loading its AOF) comes back with Redis.
        let give_up = tokio::time::Instant::now() + RESTART_FOR;
        loop {
            match self.launch(i).await {
                Ok(()) => break,
                Err(e) if tokio::time::Instant::now() < give_up => {
                    tracing::warn!(host = i, error = %e, "SDK host did not start again; starting it once more");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => {
                    return Err(e.context(format!(
                        "SDK host {i} did not start again within {} s of its kill",
                        RESTART_FOR.as_secs()
                    )));
                }
            }
        }
        if let Ok(mut t) = self.last_back.lock() {
            *t = Some(std::time::Instant::now());
        }
        Ok(())
    }

    /// After host `i`'s process ended: waits for its reader and keeps its counters.
    /// One a fault `killed` gets its rewards marked, with the bound on those that can
    /// have died unstored; one that ended without closing otherwise is an error.
    pub(super) async fn bury(&self, host: &Host, i: usize, killed: bool) -> anyhow::Result<()> {
        if let Some(r) = host.reader.lock().await.take() {
            let _ = r.await;
        }
        let (accepted, in_doubt, stats, bound) = {
            let mut s = host
                .state
                .lock()
                .map_err(|_| anyhow::anyhow!("SDK host {i}: state poisoned"))?;
            match s.closed.clone() {
                Some(closed) => (Vec::new(), Vec::new(), closed, None),
                None => {
                    // What it still held is gone, not waiting.
                    let mut last = s.stats.clone();
                    last.died_in_memory = last.unsettled;
                    last.unsettled = 0;
                    let in_doubt = std::mem::take(&mut s.in_doubt);
                    let unwritten = last
                        .accepted
                        .saturating_sub(last.tokens_written + last.tokens_given_up);
                    let bound = unwritten + s.accepted_since_stats + in_doubt.len() as u64;
                    (std::mem::take(&mut s.accepted), in_doubt, last, Some(bound))
                }
            }
        };
        if let Ok(mut g) = self.gone.lock() {
            g.add(&stats);
        }
        let Some(bound) = bound else {
            return Ok(());
        };
        if !killed {
            anyhow::bail!(
                "SDK host {i} ended without closing and no fault killed it (see {}); its rewards are not excused",
                self.dir.join(format!("sdk-host{i}.log")).display()
            );
        }
        let mut marks = self
            .marks
            .lock()
            .map_err(|_| anyhow::anyhow!("marks poisoned"))?;
        for (t, kind) in &accepted {
            writeln!(marks, "{t}\t{kind}")?;
        }
        for t in &in_doubt {
            writeln!(marks, "{t}\tin_doubt")?;
        }
        writeln!(marks, "{BOUND}\t{bound}")?;
        marks.flush()?;
        Ok(())
    }

    /// Closes every live host (each delivers or spools what it holds, 30 s at most)
    /// and answers the counters summed over every host.
    pub(crate) async fn close(&self) -> anyhow::Result<HostStats> {
        let hosts: Vec<(usize, Arc<Host>)> = self
            .hosts
            .lock()
            .map(|mut h| {
                h.iter_mut()
                    .enumerate()
                    .filter_map(|(i, slot)| slot.take().map(|h| (i, h)))
                    .collect()
            })
            .unwrap_or_default();
        for (_, h) in &hosts {
            if let Ok(mut s) = h.stdin.lock() {
                s.take();
            }
        }
        let mut first_error = None;
        for (i, h) in hosts {
            let mut child = h.child.lock().await;
            if tokio::time::timeout(Duration::from_secs(60), child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
            drop(child);
            if let Err(e) = self.bury(&h, i, false).await {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(self.gone.lock().map(|g| g.clone()).unwrap_or_default()),
        }
    }
}

/// Reads a host's lines until its stdout ends: answers resolve their calls (an
/// accepted one is remembered first, so a kill right after cannot miss it), counters
/// are kept. When the pipe ends without a close, the calls still pending are left in
/// `pending` for [`HostPool::bury`] and their callers are told "in doubt".
pub(super) async fn read_host(
    out: tokio::process::ChildStdout,
    state: Arc<Mutex<HostState>>,
    ready: oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    let mut lines = tokio::io::BufReader::new(out).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(msg) = serde_json::from_str::<FromHost>(&line) else {
            eprintln!("replay: an SDK host wrote a line that is not its protocol; ignored");
            continue;
        };
        let Ok(mut s) = state.lock() else { return };
        match msg {
            FromHost::Answer {
                id,
                refusal,
                stored,
                held_by,
            } => {
                if let Some((trade, tx)) = s.pending.remove(&id) {
                    let sent = match refusal {
                        None => {
                            let mark = match (stored, held_by.as_str()) {
                                (true, _) => "stored",
                                (false, "queued" | "spooled") => "queued",
                                _ => "accepted",
                            };
                            s.accepted.push((trade, mark));
                            s.accepted_since_stats += 1;
                            Sent::Accepted(
                                ANSWER_PATHS
                                    .iter()
                                    .find(|p| **p == held_by)
                                    .copied()
                                    .unwrap_or("sdk_host_other"),
                            )
                        }
                        Some(k) => Sent::Refused(
                            KINDS
                                .iter()
                                .find(|x| **x == k)
                                .copied()
                                .unwrap_or("sdk_host_other"),
                        ),
                    };
                    let _ = tx.send(sent);
                }
            }
            FromHost::Stats(st) => {
                s.stats = st;
                s.accepted_since_stats = 0;
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
            }
            FromHost::Closed(st) => {
                s.stats = st.clone();
                s.closed = Some(st);
            }
        }
    }
    // The pipe ended: pending calls are in doubt (kept for the marks), callers are
    // told now, and no call is taken any more.
    if let Ok(mut s) = state.lock() {
        s.dead = true;
        let pending: Vec<(String, oneshot::Sender<Sent>)> =
            s.pending.drain().map(|(_, p)| p).collect();
        for (trade, tx) in pending {
            let _ = tx.send(Sent::InDoubt);
            s.in_doubt.push(trade);
        }
    }
}
