//! A TCP proxy on loopback that misbehaves on command: the network faults of a replay.
//!
//! A replay points a part (the reward service, a consumer, the activity side) at a
//! [`Proxy`] instead of the server it talks to (Redis, the wallet), and a fault plan
//! switches the proxy's [`Mode`] for a while. Every mode acts on the connections
//! already open as well as on new ones, in both directions unless it says otherwise:
//!
//! | mode | what the part sees |
//! | --- | --- |
//! | [`Mode::Pass`] | the server, as if directly connected |
//! | [`Mode::Latency`] | every chunk of bytes delayed by `delay` ± `jitter`, order kept |
//! | [`Mode::Blackhole`] | connects succeed, nothing flows either way; when it lifts, what was held flows on (TCP would have retransmitted it): timeouts, never lost bytes |
//! | [`Mode::Reset`] | every open connection reset (RST), and each new one reset at once |
//! | [`Mode::DropAnswers`] | requests reach the server, its answers are thrown away; when it lifts, each connection that lost an answer is reset |
//! | [`Mode::Bandwidth`] | each direction capped at `bytes_per_sec`, shared by every connection |
//!
//! # Why these semantics
//! A byte stream cannot lose bytes in its middle and go on: a client pipelining
//! commands (a Redis client does) would match later answers to the wrong commands.
//! Real one-way cuts end in a timeout and then a dead connection, so `DropAnswers`
//! discards answers while it lasts and then resets the connections that lost some:
//! the server did the work, the client never heard (the in-doubt case every remote
//! call must survive). A blackhole likewise only holds bytes: a real partition drops
//! packets, and TCP sends them again once the path is back.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! use faultproxy::{Mode, Proxy};
//! let server = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let proxy = Proxy::start(server.local_addr()?).await?;
//! // Point the client at proxy.addr(); later:
//! proxy.set(Mode::Latency {
//!     delay: std::time::Duration::from_millis(200),
//!     jitter: std::time::Duration::from_millis(20),
//! });
//! proxy.set(Mode::Pass);
//! assert_eq!(proxy.stats().connections, 0);
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// How the proxy treats the bytes through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything at once.
    Pass,
    /// Delay every chunk by `delay` plus a uniform amount in `-jitter..=jitter` (never
    /// below zero), keeping each direction's order.
    Latency {
        /// The added one-way delay.
        delay: Duration,
        /// The spread around it.
        jitter: Duration,
    },
    /// Accept, never answer: nothing flows until the mode changes.
    Blackhole,
    /// Reset every connection, open or new.
    Reset,
    /// Forward requests, throw the answers away; reset the connections that lost one
    /// when the mode changes.
    DropAnswers,
    /// Cap each direction at this many bytes a second, over every connection.
    Bandwidth {
        /// The cap.
        bytes_per_sec: u64,
    },
}

/// What the proxy has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: u64,
    /// Connections reset by the proxy (a `Reset`, or after answers were dropped).
    pub resets: u64,
    /// Bytes forwarded client to server.
    pub up_bytes: u64,
    /// Bytes forwarded server to client.
    pub down_bytes: u64,
    /// Answer bytes thrown away (`DropAnswers`).
    pub dropped_bytes: u64,
}

/// Why a proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The listening socket could not be bound.
    #[error("fault proxy: cannot listen on {addr}: {source}")]
    Bind {
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

impl From<ProxyError> for std::io::Error {
    fn from(e: ProxyError) -> Self {
        std::io::Error::other(e)
    }
}

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    resets: AtomicU64,
    up: AtomicU64,
    down: AtomicU64,
    dropped: AtomicU64,
}

struct Shared {
    mode: watch::Sender<Mode>,
    counters: Counters,
    /// Per direction (up, down): when the bandwidth cap lets the next byte through.
    buckets: [Mutex<Instant>; 2],
}

impl Shared {
    /// Reserves `n` bytes of direction `dir` under a cap: answers when they have
    /// passed.
    fn reserve(&self, dir: Dir, n: usize, bytes_per_sec: u64, now: Instant) -> Instant {
        let cost = Duration::from_secs_f64(n as f64 / bytes_per_sec.max(1) as f64);
        match self.buckets[dir as usize].lock() {
            Ok(mut next) => {
                let start = (*next).max(now);
                *next = start + cost;
                *next
            }
            Err(_) => now + cost,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// Client to server: requests.
    Up = 0,
    /// Server to client: answers.
    Down = 1,
}

/// A proxy listening on loopback and forwarding to one server. Dropping it stops it
/// and closes every connection through it.
pub struct Proxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream)
            .field("mode", &self.mode())
            .finish()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Proxy {
    /// Listens on `127.0.0.1` (a port of the system's choosing) and forwards to
    /// `upstream`, in [`Mode::Pass`].
    pub async fn start(upstream: SocketAddr) -> Result<Self, ProxyError> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), upstream).await
    }

    /// As [`Proxy::start`], listening on `listen`.
    pub async fn start_on(listen: SocketAddr, upstream: SocketAddr) -> Result<Self, ProxyError> {
        let bind = |source| ProxyError::Bind {
            addr: listen,
            source,
        };
        let listener = TcpListener::bind(listen).await.map_err(bind)?;
        let addr = listener.local_addr().map_err(bind)?;
        let now = Instant::now();
        let shared = Arc::new(Shared {
            mode: watch::Sender::new(Mode::Pass),
            counters: Counters::default(),
            buckets: [Mutex::new(now), Mutex::new(now)],
        });
        let accept = tokio::spawn(accept_loop(listener, upstream, shared.clone()));
        Ok(Self {
            addr,
            upstream,
            shared,
            accept,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server behind it.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Switches the mode, for open connections and new ones.
    pub fn set(&self, mode: Mode) {
        // A cap starts afresh: no debt from an earlier one.
        let now = Instant::now();
        for b in &self.shared.buckets {
            if let Ok(mut next) = b.lock() {
                *next = now;
            }
        }
        self.shared.mode.send_replace(mode);
    }

    /// The mode now.
    pub fn mode(&self) -> Mode {
        *self.shared.mode.borrow()
    }

    /// The counters so far.
    pub fn stats(&self) -> ProxyStats {
        let c = &self.shared.counters;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProxyStats {
            connections: n(&c.connections),
            resets: n(&c.resets),
            up_bytes: n(&c.up),
            down_bytes: n(&c.down),
            dropped_bytes: n(&c.dropped),
        }
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    // Dropped with the task: every connection task is aborted with it.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    shared.counters.connections.fetch_add(1, Ordering::Relaxed);
                    connections.spawn(serve(client, upstream, shared.clone()));
                }
                // Out of descriptors or the like: wait a little rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Resets a connection: a zero linger turns the close into an RST.
fn reset(s: &TcpStream, shared: &Shared) {
    let _ = s.set_zero_linger();
    shared.counters.resets.fetch_add(1, Ordering::Relaxed);
}

/// How one direction of a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Its reader saw the end of the stream; everything read was written.
    Eof,
    /// A socket failed, or the proxy is going away: close the connection.
    Closed,
    /// The connection is to be reset.
    Reset,
}

async fn serve(client: TcpStream, upstream: SocketAddr, shared: Arc<Shared>) {
    let mut mode = shared.mode.subscribe();
    // A blackhole holds a new connection before the server even hears of it.
    loop {
        let now = *mode.borrow_and_update();
        match now {
            Mode::Reset => return reset(&client, &shared),
            Mode::Blackhole => {
                if mode.changed().await.is_err() {
                    return;
                }
            }
            _ => break,
        }
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        // The server is away: the client learns it as a reset, as it would directly.
        return reset(&client, &shared);
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let poisoned = AtomicBool::new(false);
    let was_reset = {
        let up = pump(&mut cr, &mut sw, Dir::Up, &shared, mode.clone(), &poisoned);
        let down = pump(&mut sr, &mut cw, Dir::Down, &shared, mode, &poisoned);
        tokio::pin!(up, down);
        let (mut up_done, mut down_done) = (false, false);
        loop {
            let end = tokio::select! {
                e = &mut up, if !up_done => { up_done = true; e }
                e = &mut down, if !down_done => { down_done = true; e }
            };
            match end {
                End::Reset => break true,
                End::Closed => break false,
                End::Eof if up_done && down_done => break false,
                End::Eof => {}
            }
        }
    };
    if was_reset {
        reset(cw.as_ref(), &shared);
        let _ = sw.as_ref().set_zero_linger();
        // A write half shuts its direction down (a FIN) when dropped, which the peer
        // would read as a clean end before the RST; forgotten, the socket closes
        // with the read half, as a reset only.
        cw.forget();
        sw.forget();
    }
}

/// Moves one direction's bytes under the mode of the moment: a reader that applies the
/// mode to each chunk it reads, and a writer that writes each chunk when it is due.
async fn pump(
    r: &mut OwnedReadHalf,
    w: &mut OwnedWriteHalf,
    dir: Dir,
    shared: &Shared,
    mut mode: watch::Receiver<Mode>,
    poisoned: &AtomicBool,
) -> End {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(256);
    let reading = async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut last_due = Instant::now();
        loop {
            let now_mode = *mode.borrow_and_update();
            if poisoned.load(Ordering::Acquire) && now_mode != Mode::DropAnswers {
                return End::Reset;
            }
            match now_mode {
                Mode::Reset => return End::Reset,
                Mode::Blackhole => {
                    if mode.changed().await.is_err() {
                        return End::Closed;
                    }
                    continue;
                }
                _ => {}
            }
            let n = tokio::select! {
                read = r.read(&mut buf) => match read {
                    Ok(0) => return End::Eof,
                    Ok(n) => n,
                    Err(_) => return End::Closed,
                },
                changed = mode.changed() => {
                    if changed.is_err() {
                        return End::Closed;
                    }
                    continue;
                }
            };
            // The mode may have changed while the read waited; the chunk follows the
            // mode of the moment it arrived. A connection that lost an answer is never
            // resumed, not even by a chunk read as the drop ended. A chunk read just as
            // a blackhole began (the read and the change were ready together) is held
            // until it lifts, like everything else sent into it.
            let mut now_mode = *mode.borrow_and_update();
            while now_mode == Mode::Blackhole {
                if mode.changed().await.is_err() {
                    return End::Closed;
                }
                now_mode = *mode.borrow_and_update();
            }
            if now_mode == Mode::Reset {
                return End::Reset;
            }
            if poisoned.load(Ordering::Acquire) && now_mode != Mode::DropAnswers {
                return End::Reset;
            }
            let now = Instant::now();
            let due = match now_mode {
                Mode::DropAnswers if dir == Dir::Down => {
                    shared
                        .counters
                        .dropped
                        .fetch_add(n as u64, Ordering::Relaxed);
                    poisoned.store(true, Ordering::Release);
                    continue;
                }
                Mode::Latency { delay, jitter } => now + jittered(delay, jitter),
                Mode::Bandwidth { bytes_per_sec } => shared.reserve(dir, n, bytes_per_sec, now),
                _ => now,
            };
            last_due = last_due.max(due);
            if tx.send((last_due, buf[..n].to_vec())).await.is_err() {
                return End::Closed;
            }
            // Under a cap the reader waits for its chunk's turn before reading more:
            // the sender feels the cap (TCP back-pressure), and no backlog builds up
            // to outlast the fault.
            if let Mode::Bandwidth { .. } = now_mode {
                tokio::select! {
                    _ = tokio::time::sleep_until(last_due) => {}
                    _ = mode.changed() => {}
                }
            }
        }
    };
    let counter = match dir {
        Dir::Up => &shared.counters.up,
        Dir::Down => &shared.counters.down,
    };
    let writing = async {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if w.write_all(&bytes).await.is_err() {
                return End::Closed;
            }
            counter.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        // The reader is done and everything it read is written: pass the half-close on.
        let _ = w.shutdown().await;
        End::Eof
    };
    tokio::pin!(reading, writing);
    let mut read_done = false;
    loop {
        tokio::select! {
            e = &mut reading, if !read_done => match e {
                End::Eof => read_done = true,
                other => return other,
            },
            e = &mut writing => return e,
        }
    }
}

/// `delay` plus a uniform amount in `-jitter..=jitter`, never below zero.
fn jittered(delay: Duration, jitter: Duration) -> Duration {
    if jitter.is_zero() {
        return delay;
    }
    let j = u64::try_from(jitter.as_micros()).unwrap_or(u64::MAX / 2);
    let off = rand::rng().random_range(0..=j.saturating_mul(2));
    let base = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX / 2);
    Duration::from_micros((base + off).saturating_sub(j))
}

#[cfg(test)]
mod tests;
