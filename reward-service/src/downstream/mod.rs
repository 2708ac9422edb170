//! Downstream systems that really credit a reward (wallets, coupon systems), behind one
//! trait, and the built-in Redis [`Ledger`].
//!
//! # Errors are classified by code
//! A downstream failure carries an [`ErrorCode`]; whether it is worth retrying is a
//! property of the code ([`ErrorCode::retryable`]), never of the message text, which
//! downstream teams reword at will.
//!
//! # The downstream contract: every call can do its work and still fail
//! A credit whose answer is lost (timeout after the request left, connection reset,
//! a 5xx that does not say "not credited", `409` for a key in use) may have credited.
//! Such an error is **in doubt** ([`CreditError::in_doubt`]); the grant keeps its
//! deduction and is resolved, never assumed uncredited ([`crate::grant`]). How a
//! downstream lets that doubt be resolved is its [`Contract`]:
//!
//! | contract | how an in-doubt credit is resolved |
//! | --- | --- |
//! | `honours_key`: a repeated credit with the same `Idempotency-Key` (the trade number) credits once and answers the first receipt | the credit is sent again with the same key |
//! | `status`: the downstream answers whether a trade number was credited ([`Downstream::status`]) | the status is asked first; credited → recorded, not credited → credited |
//! | neither | one attempt only; the grant is held `IN_DOUBT` for an operator (metric, `reward-ctl in-doubt`), never credited again automatically |
//!
//! Each contract also names its longest call ([`Contract::max_call_ms`]): claim leases
//! must outlast it, so no takeover starts while the first call can still land.
//!
//! # The ledger checks the service
//! The built-in Redis [`Ledger`] always answers status (its credited hash is the
//! truth). By default it does **not** honour the key: when it sees a trade number it
//! has already credited, it credits again and counts a **double-credit incident**, so
//! tests and replays prove that the service itself never sends a second effective
//! credit. Configured to honour the key ([`Ledger::honouring_key`],
//! `honours_idempotency_key = true`), it behaves as a real wallet does: a repeat
//! answers the first receipt and moves nothing (counted as a repeat, not an
//! incident); a repeat with another user, type or amount is refused as `INVALID` and
//! counted as an incident. The counts live in Redis (per user, beside the balance,
//! same hash tag), so a reconciliation run by another process sees them.
//!
//! The credited trade numbers are a hash, trade number → credit time (Unix ms, the
//! service's clock), so the load tester can measure send-to-credit latency of every
//! reward after a replay without sampling. An optional capacity per reward type
//! (credits per second) answers `RateLimited` above it, to stand in for the weakest
//! downstream (2 000 credits/s, docs/design.md). Its calls to Redis are bounded by
//! [`LEDGER_TIMEOUT`].
//!
//! # A batch's credits travel together
//! A `GrantBatch` hands each downstream all its credits at once
//! ([`Downstream::credit_many`]). Each credit stays its own operation with its own
//! answer, so one refused credit never fails another. The ledger takes a batch as a
//! wallet's batch credit API would: one script call (per cluster slot) that decides
//! and answers each credit as if alone. It used to be one script call per credit in
//! one pipeline, but fred writes every script call to the socket on its own, pipeline
//! or not, so the pipeline saved no system call, and a script call's own cost in Redis
//! (~10 µs) was most of a credit's: the ledger was half the script calls of a
//! `GrantBatch` (docs/findings/benchmarks-history.md, "Calls, not commands"). A call
//! that fails leaves all its credits in doubt (Redis does not roll a script back),
//! resolved by [`Downstream::status`] like any other. A downstream without a batch
//! API (HTTP) gets its credits sent concurrently, one request each.

use std::future::Future;
use std::pin::Pin;

mod http;
mod ledger;

pub use self::http::{Http, HttpOptions};
pub use self::ledger::{Account, LEDGER_TIMEOUT, Ledger};

/// One credit to perform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credit {
    /// The idempotency key (downstreams that support one get it as such).
    pub trade_no: String,
    /// Who is credited.
    pub user_id: String,
    /// What is credited.
    pub reward_type: String,
    /// How much.
    pub amount: i64,
}

impl From<&crate::claim::Grant> for Credit {
    /// The credit a claimed grant asks of its downstream.
    fn from(g: &crate::claim::Grant) -> Self {
        Credit {
            trade_no: g.trade_no.clone(),
            user_id: g.user_id.clone(),
            reward_type: g.reward_type.clone(),
            amount: g.amount,
        }
    }
}

/// Why a downstream did not credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// No answer in time (the credit may or may not have happened).
    Timeout,
    /// Over the downstream's capacity.
    RateLimited,
    /// The downstream failed (5xx, connection refused or reset).
    Unavailable,
    /// Another request with the same idempotency key is in flight (`409`).
    KeyInUse,
    /// The request itself is wrong (4xx validation).
    Invalid,
    /// The account cannot take credits.
    AccountClosed,
}

impl ErrorCode {
    /// The stable name of the code, as the APIs and the failure records carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::RateLimited => "RATE_LIMITED",
            ErrorCode::Unavailable => "UNAVAILABLE",
            ErrorCode::KeyInUse => "KEY_IN_USE",
            ErrorCode::Invalid => "INVALID",
            ErrorCode::AccountClosed => "ACCOUNT_CLOSED",
        }
    }

    /// Whether the same credit may succeed if sent again later.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::Timeout
                | ErrorCode::RateLimited
                | ErrorCode::Unavailable
                | ErrorCode::KeyInUse
        )
    }

    /// Whether an error of this code leaves the credit's outcome unknown unless the
    /// downstream said otherwise: no answer, a failed server, a key still in use.
    fn doubtful(self) -> bool {
        matches!(
            self,
            ErrorCode::Timeout | ErrorCode::Unavailable | ErrorCode::KeyInUse
        )
    }
}

/// A downstream's refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("downstream {code:?}: {detail}")]
pub struct CreditError {
    /// What kind of failure (decides retry).
    pub code: ErrorCode,
    /// For logs and the failure archive (never a credential: URLs are redacted).
    pub detail: String,
    /// True when the credit may have happened anyway (see the module doc): the grant
    /// is then resolved, never treated as not credited.
    pub in_doubt: bool,
}

impl CreditError {
    /// An error of `code`, in doubt exactly when the code leaves the outcome unknown
    /// (timeout, unavailable, key in use).
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            in_doubt: code.doubtful(),
        }
    }

    /// An error of `code` that is known to have credited nothing: the request never
    /// left (connection refused), or the downstream said so.
    pub fn not_credited(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            in_doubt: false,
        }
    }
}

/// What a successful credit returns (stored as the grant's result).
pub type Receipt = String;

/// What a downstream says of a trade number it was asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreditStatus {
    /// Credited, with its receipt.
    Credited(Receipt),
    /// Never credited (and, the contract says, never will be by an earlier call).
    NotCredited,
}

/// How a downstream lets an in-doubt credit be resolved (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contract {
    /// A repeated credit with the same idempotency key credits once.
    pub honours_key: bool,
    /// [`Downstream::status`] answers.
    pub status: bool,
    /// The longest one credit or status call can take, retries included (ms).
    pub max_call_ms: u64,
}

impl Contract {
    /// Whether an in-doubt credit can be resolved without an operator.
    pub fn resolvable(&self) -> bool {
        self.honours_key || self.status
    }
}

/// A boxed credit future (the trait is used as `dyn`, one per reward type).
pub type CreditFuture<'a> = Pin<Box<dyn Future<Output = Result<Receipt, CreditError>> + Send + 'a>>;

/// A boxed future of many credits' answers, in the order asked.
pub type CreditManyFuture<'a> =
    Pin<Box<dyn Future<Output = Vec<Result<Receipt, CreditError>>> + Send + 'a>>;

/// A boxed status future.
pub type StatusFuture<'a> =
    Pin<Box<dyn Future<Output = Result<CreditStatus, CreditError>> + Send + 'a>>;

/// A system that credits rewards.
pub trait Downstream: Send + Sync + std::fmt::Debug {
    /// Credits `c` once (as far as this downstream is concerned).
    fn credit<'a>(&'a self, c: &'a Credit) -> CreditFuture<'a>;

    /// Credits each of `cs` once, answering for each in order. The default sends
    /// them all at once as single credits; a downstream that can carry many credits
    /// in one round trip (the [`Ledger`]) overrides it. Either way each credit is its
    /// own operation with its own answer: one failing does not fail the others.
    fn credit_many<'a>(&'a self, cs: &'a [Credit]) -> CreditManyFuture<'a> {
        Box::pin(futures_util::future::join_all(
            cs.iter().map(|c| self.credit(c)),
        ))
    }

    /// What this downstream promises (module doc). The default is the weakest
    /// promise: no key honoured, no status, so an in-doubt credit is held for an
    /// operator rather than ever sent twice.
    fn contract(&self) -> Contract {
        Contract {
            honours_key: false,
            status: false,
            max_call_ms: 0,
        }
    }

    /// Whether `c`'s trade number was credited. Only called when
    /// [`Contract::status`] is true; the default answers an error.
    fn status<'a>(&'a self, c: &'a Credit) -> StatusFuture<'a> {
        let _ = c;
        Box::pin(async {
            Err(CreditError::new(
                ErrorCode::Unavailable,
                "this downstream has no status query",
            ))
        })
    }
}

/// A URL as it may be shown: without user name or password.
pub fn redacted(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    if !shown.username().is_empty() || shown.password().is_some() {
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
    }
    shown.to_string()
}
