//! The downstream double, for downstream fault drills: an HTTP downstream (what a
//! real company's wallet or coupon service is to the reward service) that the replay
//! runs in its own process and puts between the reward service and the Redis ledger when
//! a fault plan breaks the downstream (`downstream-fail`, `downstream-slow`,
//! `downstream-timeout-after-credit`).
//!
//! It keeps the reward service's HTTP downstream contract
//! (`reward_service::downstream::Http`) as a real downstream does:
//! - `POST /credit` with JSON `{trade_no, user_id, reward_type, amount}` and the
//!   trade number as `Idempotency-Key`: 2xx with `{"ref": ...}` when credited. A key
//!   it has credited before answers the first receipt again and credits nothing; a key
//!   whose first request is still running answers `409 {"code": "KEY_IN_USE"}`.
//! - `GET /status?trade_no=..&user_id=..`: `{"state": "CREDITED", "ref": ...}` or
//!   `{"state": "NOT_CREDITED"}`; 503 while a request with that key is running.
//! - An injected failure answers `503 {"code": "NOT_CREDITED"}` before the ledger is
//!   touched.
//!
//! Behind it the real ledger credits (same key prefix, so the reconciliation reads the
//! same data as without the double), and that ledger stays strict: if the double or the
//! service ever sent a second effective credit, its double-credit count would show
//! it. The key table lives in this process's memory for the run: it stands in for a
//! downstream's own idempotency store.
//!
//! `downstream-timeout-after-credit` is the in-doubt case every real downstream has: the
//! credit happens, then the answer comes [`LATE_MS`] later, after the service has
//! given up waiting.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use reward_service::downstream::{Credit, CreditStatus, Downstream as _, Ledger};

/// The longest delay a plan may ask for, ms (the service's HTTP timeout for the
/// downstream is [`TIMEOUT_MS`]).
pub const MAX_DELAY_MS: u64 = 1_000;
/// The reward service's timeout for calls to the downstream, ms.
pub const TIMEOUT_MS: u64 = 3_000;
/// How late a late answer comes, ms: well past [`TIMEOUT_MS`].
pub const LATE_MS: u64 = TIMEOUT_MS + 1_500;

#[derive(Debug, Clone)]
enum Key {
    /// A request with this key is running.
    InFlight,
    /// Credited, with this receipt.
    Done(String),
}

#[derive(Debug, Default)]
struct Faults {
    /// Share of calls answered 503, in millionths.
    fail_ppm: AtomicU64,
    /// Delay before answering, ms.
    delay_ms: AtomicU64,
    /// Share of credits answered [`LATE_MS`] after crediting, in millionths.
    late_ppm: AtomicU64,
    calls: AtomicU64,
    failed: AtomicU64,
    late: AtomicU64,
    repeats: AtomicU64,
}

#[derive(Debug)]
struct Inner {
    ledger: Ledger,
    faults: Faults,
    keys: Mutex<HashMap<String, Key>>,
}

/// A running downstream double.
#[derive(Debug, Clone)]
pub struct DownstreamDouble {
    /// Where it listens.
    pub addr: SocketAddr,
    inner: Arc<Inner>,
}

#[derive(Debug, serde::Deserialize)]
struct CreditBody {
    trade_no: String,
    user_id: String,
    reward_type: String,
    amount: i64,
}

#[derive(Debug, serde::Deserialize)]
struct StatusQuery {
    trade_no: String,
    user_id: String,
}

type Answer = (StatusCode, Json<HashMap<&'static str, String>>);

fn answer(status: StatusCode, pairs: &[(&'static str, &str)]) -> Answer {
    (
        status,
        Json(pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()),
    )
}

fn roll(ppm: u64) -> bool {
    ppm > 0 && rand::random_range(0..1_000_000) < ppm
}

fn ppm(share: f64) -> u64 {
    (share.clamp(0.0, 1.0) * 1e6).round() as u64
}

impl DownstreamDouble {
    /// Starts the double on a loopback port, crediting into `ledger`.
    pub async fn start(ledger: Ledger) -> anyhow::Result<Self> {
        let inner = Arc::new(Inner {
            ledger,
            faults: Faults::default(),
            keys: Mutex::new(HashMap::new()),
        });
        let app = axum::Router::new()
            .route("/credit", post(credit))
            .route("/status", get(status))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "the downstream double stopped");
            }
        });
        Ok(Self { addr, inner })
    }

    /// Where it listens (a fault proxy in front of it forwards here).
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// The URL the reward service posts credits to.
    pub fn url(&self) -> String {
        format!("http://{}/credit", self.addr)
    }

    /// The URL the reward service asks for a trade number's status.
    pub fn status_url(&self) -> String {
        format!("http://{}/status", self.addr)
    }

    /// Fails `share` (0..=1) of calls from now on.
    pub fn set_fail_share(&self, share: f64) {
        self.inner
            .faults
            .fail_ppm
            .store(ppm(share), Ordering::Relaxed);
    }

    /// Answers `share` (0..=1) of credits [`LATE_MS`] after crediting, from now on.
    pub fn set_late_share(&self, share: f64) {
        self.inner
            .faults
            .late_ppm
            .store(ppm(share), Ordering::Relaxed);
    }

    /// Holds every call `delay` before answering (capped at [`MAX_DELAY_MS`]).
    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.inner
            .faults
            .delay_ms
            .store(ms.min(MAX_DELAY_MS), Ordering::Relaxed);
    }

    /// Calls served and calls failed on purpose.
    pub fn counts(&self) -> (u64, u64) {
        let f = &self.inner.faults;
        (
            f.calls.load(Ordering::Relaxed),
            f.failed.load(Ordering::Relaxed),
        )
    }

    /// Credits answered late on purpose, and repeats answered with the first receipt.
    pub fn late_and_repeats(&self) -> (u64, u64) {
        let f = &self.inner.faults;
        (
            f.late.load(Ordering::Relaxed),
            f.repeats.load(Ordering::Relaxed),
        )
    }
}

impl Inner {
    fn key(&self, trade_no: &str) -> Option<Key> {
        self.keys.lock().map_or(None, |k| k.get(trade_no).cloned())
    }

    fn set_key(&self, trade_no: &str, v: Option<Key>) {
        if let Ok(mut k) = self.keys.lock() {
            match v {
                Some(v) => k.insert(trade_no.to_string(), v),
                None => k.remove(trade_no),
            };
        }
    }

    /// Takes the key for a new request: `Err` with the answer when it is in use or done.
    fn take_key(&self, trade_no: &str) -> Result<(), Answer> {
        let Ok(mut keys) = self.keys.lock() else {
            return Err(answer(StatusCode::INTERNAL_SERVER_ERROR, &[]));
        };
        match keys.get(trade_no) {
            Some(Key::InFlight) => Err(answer(StatusCode::CONFLICT, &[("code", "KEY_IN_USE")])),
            Some(Key::Done(r)) => {
                self.faults.repeats.fetch_add(1, Ordering::Relaxed);
                Err(answer(StatusCode::OK, &[("ref", r)]))
            }
            None => {
                keys.insert(trade_no.to_string(), Key::InFlight);
                Ok(())
            }
        }
    }
}

async fn credit(State(w): State<Arc<Inner>>, Json(body): Json<CreditBody>) -> Answer {
    w.faults.calls.fetch_add(1, Ordering::Relaxed);
    if let Err(a) = w.take_key(&body.trade_no) {
        return a;
    }
    // A downstream finishes a credit it started whether or not its caller waits: run it
    // apart from the request, so a caller that times out and hangs up cannot leave
    // the key in flight for ever (status would then answer KEY_IN_USE to every
    // resolution, and the grant would stay in doubt).
    let trade_no = body.trade_no.clone();
    match tokio::spawn(credit_key(w.clone(), body)).await {
        Ok(a) => a,
        Err(_) => {
            w.set_key(&trade_no, None);
            answer(
                StatusCode::INTERNAL_SERVER_ERROR,
                &[("error", "credit task failed")],
            )
        }
    }
}

/// The credit of a key taken by [`credit`].
async fn credit_key(w: Arc<Inner>, body: CreditBody) -> Answer {
    let delay = w.faults.delay_ms.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if roll(w.faults.fail_ppm.load(Ordering::Relaxed)) {
        w.faults.failed.fetch_add(1, Ordering::Relaxed);
        w.set_key(&body.trade_no, None);
        return answer(
            StatusCode::SERVICE_UNAVAILABLE,
            &[("code", "NOT_CREDITED"), ("error", "injected failure")],
        );
    }
    let c = Credit {
        trade_no: body.trade_no,
        user_id: body.user_id,
        reward_type: body.reward_type,
        amount: body.amount,
    };
    let receipt = match w.ledger.credit(&c).await {
        Ok(r) => r,
        // The ledger's answer was lost: ask it, as the service would ask us.
        Err(e) => match w.ledger.status(&c).await {
            Ok(CreditStatus::Credited(r)) => r,
            Ok(CreditStatus::NotCredited) => {
                w.set_key(&c.trade_no, None);
                return answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &[("code", "NOT_CREDITED"), ("error", e.code.as_str())],
                );
            }
            // Unknown: the key stays in flight, so no repeat credits it meanwhile,
            // until the ledger answers.
            Err(_) => {
                tokio::spawn(settle_key(w.clone(), c.clone()));
                return answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &[("error", e.code.as_str())],
                );
            }
        },
    };
    w.set_key(&c.trade_no, Some(Key::Done(receipt.clone())));
    if roll(w.faults.late_ppm.load(Ordering::Relaxed)) {
        w.faults.late.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(LATE_MS)).await;
    }
    answer(StatusCode::OK, &[("ref", &receipt)])
}

/// Asks the ledger about a credit whose outcome it could not tell (every 500 ms, for
/// at most 10 minutes), then settles its key: done, or free for a repeat.
async fn settle_key(w: Arc<Inner>, c: Credit) {
    for _ in 0..1200 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        match w.ledger.status(&c).await {
            Ok(CreditStatus::Credited(r)) => return w.set_key(&c.trade_no, Some(Key::Done(r))),
            Ok(CreditStatus::NotCredited) => return w.set_key(&c.trade_no, None),
            Err(_) => {}
        }
    }
}

async fn status(State(w): State<Arc<Inner>>, Query(q): Query<StatusQuery>) -> Answer {
    match w.key(&q.trade_no) {
        Some(Key::Done(r)) => return answer(StatusCode::OK, &[("state", "CREDITED"), ("ref", &r)]),
        Some(Key::InFlight) => {
            return answer(StatusCode::SERVICE_UNAVAILABLE, &[("code", "KEY_IN_USE")]);
        }
        None => {}
    }
    let c = Credit {
        trade_no: q.trade_no,
        user_id: q.user_id,
        reward_type: String::new(),
        amount: 0,
    };
    match w.ledger.status(&c).await {
        Ok(CreditStatus::Credited(r)) => {
            answer(StatusCode::OK, &[("state", "CREDITED"), ("ref", &r)])
        }
        Ok(CreditStatus::NotCredited) => answer(StatusCode::OK, &[("state", "NOT_CREDITED")]),
        Err(e) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            &[("error", e.code.as_str())],
        ),
    }
}
