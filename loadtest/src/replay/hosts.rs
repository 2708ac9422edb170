//! The activity side of a replay: the SDK in this process, or in child processes (SDK
//! hosts) that a fault can kill with SIGKILL and start again.
//!
//! A real activity service holds the events it accepted in memory until a broker
//! takes them; when its process dies, those events die with it. To show what that
//! costs, a plan with a `kill-sdk-host` fault runs the SDK in `--sdk-hosts` child
//! processes (`loadtest sdk-host`, at least two, so the others take the traffic while
//! one is down, as a load balancer in front of a fleet would). The schedule stays
//! here: each request goes to the next live host over the child's stdin as one JSON
//! line and its answer comes back on the child's stdout; each host has its own spool
//! directory, so a restarted host replays what its predecessor spooled.
//!
//! When a host dies, two kinds of reward are marked in the run's `hosts.tsv`:
//! - `accepted`: the host answered the call (the user was shown the reward). Its
//!   event may have died in the host's memory; if its token reached the store, the
//!   reward service's sweeper credits it after its grace period; if the host died
//!   before its deferred token write, nothing records the reward, and reconciliation
//!   counts it as lost with the host instead of missing.
//! - `in_doubt`: the call was in the host when it died, unanswered (the user saw an
//!   error). It may still have been stored (and so credited by the sweeper) or not.
//!
//! Reconciliation holds both kinds to the same rule as every other reward once their
//! token is in the store: credited exactly once. How many can have died unstored is
//! bounded: the token writes the host had not finished at its last counters, plus
//! the rewards it accepted after them, plus the calls in doubt; that bound is written
//! beside the marks, and reconciliation fails a run that lost more.
//!
//! A host that ends without closing when no fault killed it (a crash) fails the run:
//! its rewards are not excused.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sdk::request::{RewardRequest, User};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::sync::{mpsc, oneshot};

/// What a send came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sent {
    /// The SDK accepted the reward (a token was returned).
    Accepted,
    /// The SDK refused it (the kind of refusal).
    Refused(&'static str),
    /// The host died with the call unanswered.
    InDoubt,
}

/// The refusal kinds a host can answer, as the report names them.
const KINDS: [&str; 6] = [
    "invalid",
    "backpressure",
    "closed",
    "too_many_tokens",
    "store",
    "seal",
];

/// A refusal's kind as the report names it.
pub(crate) fn refusal(e: &sdk::SendError) -> &'static str {
    match e {
        sdk::SendError::Invalid(_) => KINDS[0],
        sdk::SendError::Backpressure(_) => KINDS[1],
        sdk::SendError::Closed => KINDS[2],
        sdk::SendError::TooManyTokens { .. } => KINDS[3],
        sdk::SendError::Store(_) => KINDS[4],
        sdk::SendError::Seal(_) => KINDS[5],
    }
}

/// The SDK's counters as a host reports them (every second, and when it closes).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct HostStats {
    pub(crate) accepted: u64,
    pub(crate) delivered: u64,
    /// Broker records delivered (a compound record holds many events).
    #[serde(default)]
    pub(crate) records: u64,
    pub(crate) failovers: u64,
    pub(crate) retries: u64,
    pub(crate) spooled: u64,
    pub(crate) replayed: u64,
    pub(crate) logged: u64,
    pub(crate) unsettled: u64,
    pub(crate) tokens_written: u64,
    pub(crate) token_attempts_failed: u64,
    pub(crate) token_retries: u64,
    pub(crate) tokens_given_up: u64,
    pub(crate) tokens_left: u64,
    /// Events a killed host still held (its last count before the kill, at most
    /// a second old): they died with it.
    #[serde(default)]
    pub(crate) died_in_memory: u64,
}

impl HostStats {
    /// An SDK's counters now (`queue` from `stats()` or a close report).
    pub(crate) fn of(sdk: &sdk::Sdk, queue: &sdk::queue::StatsSnapshot, tokens_left: u64) -> Self {
        let st = sdk.store().stats();
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Self {
            accepted: queue.accepted,
            delivered: queue.delivered,
            records: queue.records,
            failovers: queue.failovers,
            retries: queue.retries,
            spooled: queue.spooled,
            replayed: queue.replayed,
            logged: queue.logged,
            unsettled: queue.unsettled,
            tokens_written: n(&st.written),
            token_attempts_failed: n(&st.failed),
            token_retries: n(&st.retried),
            tokens_given_up: n(&st.unstored),
            tokens_left,
            died_in_memory: 0,
        }
    }

    fn add(&mut self, o: &Self) {
        self.accepted += o.accepted;
        self.delivered += o.delivered;
        self.records += o.records;
        self.failovers += o.failovers;
        self.retries += o.retries;
        self.spooled += o.spooled;
        self.replayed += o.replayed;
        self.logged += o.logged;
        self.unsettled += o.unsettled;
        self.tokens_written += o.tokens_written;
        self.token_attempts_failed += o.token_attempts_failed;
        self.token_retries += o.token_retries;
        self.tokens_given_up += o.tokens_given_up;
        self.tokens_left += o.tokens_left;
        self.died_in_memory += o.died_in_memory;
    }

    /// The queue's part, as the per-second sampler keeps it.
    pub(crate) fn snapshot(&self) -> sdk::queue::StatsSnapshot {
        sdk::queue::StatsSnapshot {
            accepted: self.accepted,
            delivered: self.delivered,
            records: self.records,
            failovers: self.failovers,
            retries: self.retries,
            spooled: self.spooled,
            replayed: self.replayed,
            logged: self.logged,
            unsettled: self.unsettled,
            per_producer: BTreeMap::new(),
        }
    }

    /// Named as the report's SDK table shows them.
    pub(crate) fn counters(&self) -> BTreeMap<String, u64> {
        [
            ("events accepted", self.accepted),
            ("events delivered", self.delivered),
            ("broker records delivered", self.records),
            ("events failed over", self.failovers),
            ("event send retries", self.retries),
            ("events spooled", self.spooled),
            ("events replayed from spool", self.replayed),
            ("events only logged", self.logged),
            ("events unsettled at close", self.unsettled),
            ("tokens written", self.tokens_written),
            ("token write attempts failed", self.token_attempts_failed),
            ("token write retries", self.token_retries),
            ("tokens given up", self.tokens_given_up),
            ("tokens left at close", self.tokens_left),
            ("events in memory of a killed SDK host", self.died_in_memory),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// One request, parent to host.
#[derive(Debug, Serialize, Deserialize)]
struct WireRequest {
    id: u64,
    trade_no: String,
    user_id: String,
    device_id: String,
    app_id: String,
    activity_id: String,
    scene_id: String,
    reward_type: String,
    amount: i64,
    description: String,
    extension: BTreeMap<String, String>,
}

impl WireRequest {
    fn new(id: u64, r: RewardRequest) -> Self {
        Self {
            id,
            trade_no: r.trade_no,
            user_id: r.user.user_id,
            device_id: r.user.device_id,
            app_id: r.user.app_id,
            activity_id: r.activity_id,
            scene_id: r.scene_id,
            reward_type: r.reward_type,
            amount: r.amount,
            description: r.description,
            extension: r.extension,
        }
    }

    fn into_request(self) -> (u64, RewardRequest) {
        let r = RewardRequest {
            trade_no: self.trade_no,
            user: User {
                user_id: self.user_id,
                device_id: self.device_id,
                app_id: self.app_id,
            },
            activity_id: self.activity_id,
            scene_id: self.scene_id,
            reward_type: self.reward_type,
            amount: self.amount,
            description: self.description,
            extension: self.extension,
        };
        (self.id, r)
    }
}

/// One line, host to parent.
#[derive(Debug, Serialize, Deserialize)]
enum FromHost {
    /// A call's answer: no refusal means accepted.
    Answer { id: u64, refusal: Option<String> },
    /// The counters, every second.
    Stats(HostStats),
    /// The host closed its SDK (every event delivered or spooled): its last counters.
    Closed(HostStats),
}

/// `loadtest sdk-host`: runs an SDK from `config` and serves requests from stdin until
/// stdin ends, then closes the SDK (30 s at most) and reports its counters.
pub async fn serve(config: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(config)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", config.display()))?;
    let cfg = sdk::config::SdkConfig::from_toml_str(&text)?;
    let sdk = Arc::new(sdk::Sdk::builder(cfg).start().await?);
    let (out, mut lines_out) = mpsc::unbounded_channel::<FromHost>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::BufWriter::new(tokio::io::stdout());
        while let Some(first) = lines_out.recv().await {
            let mut next = Some(first);
            while let Some(m) = next {
                let mut line = serde_json::to_vec(&m)?;
                line.push(b'\n');
                stdout.write_all(&line).await?;
                next = lines_out.try_recv().ok();
            }
            stdout.flush().await?;
        }
        anyhow::Ok(())
    });
    let ticker = {
        let (sdk, out) = (sdk.clone(), out.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let _ = out.send(FromHost::Stats(HostStats::of(&sdk, &sdk.stats(), 0)));
            }
        })
    };
    let mut calls = tokio::task::JoinSet::new();
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = stdin.next_line().await? {
        let wire: WireRequest = serde_json::from_str(&line)
            .map_err(|e| anyhow::anyhow!("sdk-host: malformed request line: {e}"))?;
        let (id, req) = wire.into_request();
        let (sdk, out) = (sdk.clone(), out.clone());
        calls.spawn(async move {
            let refusal = sdk
                .send_reward(req)
                .await
                .err()
                .map(|e| refusal(&e).to_string());
            let _ = out.send(FromHost::Answer { id, refusal });
        });
        while calls.try_join_next().is_some() {}
    }
    while calls.join_next().await.is_some() {}
    ticker.abort();
    let close = sdk.close(Duration::from_secs(30)).await;
    let last = HostStats::of(&sdk, &close.stats, close.tokens_left);
    let _ = out.send(FromHost::Closed(last));
    drop(out);
    writer.await??;
    Ok(())
}

/// What a host's reader saw.
#[derive(Default)]
struct HostState {
    /// Calls sent, not answered: id -> (trade number, the caller).
    pending: HashMap<u64, (String, oneshot::Sender<Sent>)>,
    /// Trade numbers this incarnation accepted.
    accepted: Vec<String>,
    /// Accepted since the last counters line.
    accepted_since_stats: u64,
    /// The pipe ended: calls pending then are in doubt (trade numbers); no new call
    /// may be sent.
    dead: bool,
    in_doubt: Vec<String>,
    /// Its latest counters.
    stats: HostStats,
    /// Its final counters, when it closed cleanly.
    closed: Option<HostStats>,
}

/// One running SDK host (one incarnation of host `index`).
struct Host {
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
}

/// The file of rewards touched by a killed host (`trade_no \t accepted|in_doubt`),
/// with one line `#bound \t N` per kill: at most N of its rewards can have died
/// before their token write.
pub(crate) const MARKS: &str = "hosts.tsv";

const BOUND: &str = "#bound";

impl HostPool {
    /// Starts `configs.len()` hosts, host `i` with the SDK config file `configs[i]`;
    /// their stderr goes to `dir/sdk-host<i>.log`.
    pub(crate) async fn start(dir: &Path, configs: Vec<PathBuf>) -> anyhow::Result<Self> {
        let exe = std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("cannot find the loadtest binary: {e}"))?;
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
        };
        for i in 0..pool.configs.len() {
            pool.launch(i).await?;
        }
        Ok(pool)
    }

    /// Starts host `i` and puts it in the rotation once it answers (its first
    /// counters line).
    async fn launch(&self, i: usize) -> anyhow::Result<()> {
        let log_path = self.dir.join(format!("sdk-host{i}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", log_path.display()))?;
        let mut child = tokio::process::Command::new(&self.exe)
            .arg("sdk-host")
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
    fn pick(&self) -> Option<Arc<Host>> {
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
        let killed = host.child.lock().await.kill().await;
        self.killed.fetch_add(1, Ordering::Relaxed);
        // Buried whatever the kill answered (it ended, or was already gone).
        self.bury(&host, i, true).await?;
        if let Err(e) = killed {
            anyhow::bail!("SDK host {i}: SIGKILL failed: {e}");
        }
        tokio::time::sleep(down).await;
        self.launch(i).await?;
        if let Ok(mut t) = self.last_back.lock() {
            *t = Some(std::time::Instant::now());
        }
        Ok(())
    }

    /// After host `i`'s process ended: waits for its reader and keeps its counters.
    /// One a fault `killed` gets its rewards marked, with the bound on those that can
    /// have died unstored; one that ended without closing otherwise is an error.
    async fn bury(&self, host: &Host, i: usize, killed: bool) -> anyhow::Result<()> {
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
        for t in &accepted {
            writeln!(marks, "{t}\taccepted")?;
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
async fn read_host(
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
            FromHost::Answer { id, refusal } => {
                if let Some((trade, tx)) = s.pending.remove(&id) {
                    let sent = match refusal {
                        None => {
                            s.accepted.push(trade);
                            s.accepted_since_stats += 1;
                            Sent::Accepted
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

/// The activity side: the SDK in this process, or SDK hosts.
pub(crate) enum Side {
    /// One SDK in this process.
    Local(Arc<sdk::Sdk>),
    /// SDK hosts (child processes).
    Hosts(Box<HostPool>),
}

impl Side {
    /// Sends one request.
    pub(crate) async fn send(&self, req: RewardRequest) -> Sent {
        match self {
            Self::Local(sdk) => match sdk.send_reward(req).await {
                Ok(_) => Sent::Accepted,
                Err(e) => Sent::Refused(refusal(&e)),
            },
            Self::Hosts(pool) => pool.send(req).await,
        }
    }

    /// The SDK's queue counters (summed over the hosts).
    pub(crate) fn stats(&self) -> sdk::queue::StatsSnapshot {
        match self {
            Self::Local(sdk) => sdk.stats(),
            Self::Hosts(pool) => pool.stats().snapshot(),
        }
    }

    /// Whether a host died during the run (its rewards are marked in `hosts.tsv`).
    pub(crate) fn lost_a_host(&self) -> bool {
        matches!(self, Self::Hosts(p) if p.killed() > 0)
    }

    /// From when a reward of a killed host that is neither stored nor credited can
    /// be taken as lost with it: after the last killed host was back (its spool
    /// replayed), the sweeper's grace period, and 10 s for the queues to deliver
    /// what was already in them. `None`: no host was killed.
    pub(crate) fn lost_settle_at(&self, grace: Duration) -> Option<std::time::Instant> {
        match self {
            Self::Hosts(p) => p.last_back().map(|t| t + grace + Duration::from_secs(10)),
            Self::Local(_) => None,
        }
    }

    /// Closes the SDK (or every host): the final counters, and the token writes
    /// given up or unanswered at close.
    pub(crate) async fn close(&self) -> anyhow::Result<(BTreeMap<String, u64>, u64)> {
        match self {
            Self::Local(sdk) => {
                let close = sdk.close(Duration::from_secs(30)).await;
                let st = HostStats::of(sdk, &close.stats, close.tokens_left);
                Ok((
                    st.counters(),
                    sdk.token_write_failures() + close.tokens_left,
                ))
            }
            Self::Hosts(pool) => {
                let st = pool.close().await?;
                Ok((st.counters(), st.tokens_given_up + st.tokens_left))
            }
        }
    }
}

/// The rewards of killed SDK hosts, as `hosts.tsv` has them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marks {
    /// Trade number -> whether the call was answered (`accepted`) or in doubt.
    pub rewards: HashMap<String, bool>,
    /// At most this many of them can have died before their token write (summed
    /// over the kills).
    pub bound: u64,
}

/// Reads a run's `hosts.tsv` (absent: no host was killed).
pub fn read_marks(dir: &Path) -> anyhow::Result<Marks> {
    let path = dir.join(MARKS);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Marks::default()),
        Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
    };
    let mut marks = Marks::default();
    for (i, line) in text.lines().enumerate() {
        let bad = |what: &str| anyhow::anyhow!("{} line {}: {what}", path.display(), i + 1);
        let (trade, kind) = line.split_once('\t').ok_or_else(|| bad("malformed"))?;
        if trade == BOUND {
            marks.bound += kind.parse::<u64>().map_err(|_| bad("bad bound"))?;
            continue;
        }
        let answered = match kind {
            "accepted" => true,
            "in_doubt" => false,
            _ => return Err(bad(&format!("unknown kind {kind:?}"))),
        };
        marks.rewards.insert(trade.to_string(), answered);
    }
    Ok(marks)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_request_crosses_the_pipe_unchanged() {
        let r = RewardRequest {
            trade_no: "t-1".into(),
            user: User {
                user_id: "u\t1".into(),
                device_id: "d".into(),
                app_id: "a".into(),
            },
            activity_id: "act".into(),
            scene_id: "scene".into(),
            reward_type: "cash".into(),
            amount: 42,
            description: "line\nbreak".into(),
            extension: [("k".to_string(), "v".to_string())].into(),
        };
        let line = serde_json::to_string(&WireRequest::new(7, r.clone())).unwrap();
        assert!(!line.contains('\n'));
        let back: WireRequest = serde_json::from_str(&line).unwrap();
        let (id, back) = back.into_request();
        assert_eq!(id, 7);
        assert_eq!(back, r);
    }

    #[test]
    fn marks_parse_and_bad_lines_are_refused() {
        let dir = std::env::temp_dir().join(format!("hosts-marks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(read_marks(&dir).unwrap(), Marks::default());
        std::fs::write(
            dir.join(MARKS),
            "a\taccepted\nb\tin_doubt\n#bound\t3\nc\taccepted\n#bound\t4\n",
        )
        .unwrap();
        let m = read_marks(&dir).unwrap();
        assert_eq!(m.rewards.get("a"), Some(&true));
        assert_eq!(m.rewards.get("b"), Some(&false));
        assert_eq!((m.rewards.len(), m.bound), (3, 7));
        std::fs::write(dir.join(MARKS), "a\tmaybe\n").unwrap();
        assert!(read_marks(&dir).is_err());
        std::fs::write(dir.join(MARKS), "#bound\tmany\n").unwrap();
        assert!(read_marks(&dir).is_err());
        std::fs::write(dir.join(MARKS), "no-tab\n").unwrap();
        assert!(read_marks(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
