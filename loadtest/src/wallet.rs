//! A stand-in wallet for downstream fault drills: an HTTP downstream the replay runs
//! in its own process and puts between the reward service and the Redis ledger when
//! a fault plan breaks the downstream (`downstream-fail`, `downstream-slow`).
//!
//! It speaks the reward service's HTTP downstream contract
//! (`reward_service::downstream::Http`): `POST /credit` with JSON
//! `{trade_no, user_id, reward_type, amount}`, 2xx with `{"ref": ...}` when credited,
//! 503 when not. Behind it the real ledger credits (same key prefix, so the
//! reconciliation reads the same data as without the wallet).
//!
//! Faults are injected **before** the ledger is touched: a failed call has credited
//! nothing, and a slowed call is held for less than the service's HTTP timeout (the
//! plan refuses longer delays). So a credit is never ambiguous, and the ledger stays
//! deliberately non-idempotent: if the service ever credited a trade number twice, the
//! double-credit check would still see it. (A timeout after a real credit is the one
//! case a downstream must resolve with the idempotency key; this wallet does not
//! exercise it.)

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use reward_service::downstream::{Credit, Downstream as _, Ledger};

/// The longest delay a plan may ask for, ms (the service's HTTP timeout for the
/// wallet is [`TIMEOUT_MS`]).
pub const MAX_DELAY_MS: u64 = 1_000;
/// The reward service's timeout for calls to the wallet, ms.
pub const TIMEOUT_MS: u64 = 3_000;

#[derive(Debug)]
struct Faults {
    /// Share of calls answered 503, in millionths.
    fail_ppm: AtomicU64,
    /// Delay before answering, ms.
    delay_ms: AtomicU64,
    calls: AtomicU64,
    failed: AtomicU64,
}

/// A running wallet.
#[derive(Debug, Clone)]
pub struct Wallet {
    /// Where it listens.
    pub addr: SocketAddr,
    faults: Arc<Faults>,
}

#[derive(Debug, serde::Deserialize)]
struct CreditBody {
    trade_no: String,
    user_id: String,
    reward_type: String,
    amount: i64,
}

impl Wallet {
    /// Starts the wallet on a loopback port, crediting into `ledger`.
    pub async fn start(ledger: Ledger) -> anyhow::Result<Self> {
        let faults = Arc::new(Faults {
            fail_ppm: AtomicU64::new(0),
            delay_ms: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        });
        let app = axum::Router::new()
            .route("/credit", post(credit))
            .with_state((ledger, faults.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "the stand-in wallet stopped");
            }
        });
        Ok(Self { addr, faults })
    }

    /// The URL the reward service posts credits to.
    pub fn url(&self) -> String {
        format!("http://{}/credit", self.addr)
    }

    /// Fails `share` (0..=1) of calls from now on.
    pub fn set_fail_share(&self, share: f64) {
        let ppm = (share.clamp(0.0, 1.0) * 1e6).round() as u64;
        self.faults.fail_ppm.store(ppm, Ordering::Relaxed);
    }

    /// Holds every call `delay` before answering (capped at [`MAX_DELAY_MS`]).
    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.faults
            .delay_ms
            .store(ms.min(MAX_DELAY_MS), Ordering::Relaxed);
    }

    /// Calls served and calls failed on purpose.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.faults.calls.load(Ordering::Relaxed),
            self.faults.failed.load(Ordering::Relaxed),
        )
    }
}

async fn credit(
    State((ledger, faults)): State<(Ledger, Arc<Faults>)>,
    Json(body): Json<CreditBody>,
) -> (StatusCode, Json<HashMap<&'static str, String>>) {
    faults.calls.fetch_add(1, Ordering::Relaxed);
    let delay = faults.delay_ms.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let ppm = faults.fail_ppm.load(Ordering::Relaxed);
    if ppm > 0 && rand::random_range(0..1_000_000) < ppm {
        faults.failed.fetch_add(1, Ordering::Relaxed);
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(HashMap::from([("error", "injected failure".to_string())])),
        );
    }
    let c = Credit {
        trade_no: body.trade_no,
        user_id: body.user_id,
        reward_type: body.reward_type,
        amount: body.amount,
    };
    match ledger.credit(&c).await {
        Ok(receipt) => (StatusCode::OK, Json(HashMap::from([("ref", receipt)]))),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(HashMap::from([("error", e.code.as_str().to_string())])),
        ),
    }
}
