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
//! reward after a replay without sampling. An optional capacity per reward type (credits per second)
//! answers `RateLimited` above it, to stand in for the weakest downstream (the brief's
//! 2 000 TPS). Its calls to Redis are bounded by [`LEDGER_TIMEOUT`].
//!
//! # A batch's credits travel together
//! A `GrantBatch` hands each downstream all its credits at once
//! ([`Downstream::credit_many`]). Each credit stays its own operation with its own
//! answer, so one refused credit never fails another. What a downstream may share is
//! the transport: the ledger sends a batch as one Redis pipeline of one script call
//! per credit (one write and one read on its connection instead of one each per
//! credit: 16 % less CPU in the consumer-bench's process, BENCHMARKS.md), and a
//! downstream without a batch API (HTTP) gets its credits sent concurrently, one
//! request each, as before. Batching the credits into one script would be cheaper
//! still, but a wallet API takes one credit per call, and the ledger stands in for one.

use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fred::prelude::*;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use reward_runtime::clock::now_ms;
use reward_runtime::script::Script;

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

/// KEYS: balance hash, credited hash, incident counter, repeat counter, receipt hash.
/// ARGV: reward type, amount, trade no, now (Unix ms), honour key (1/0), user and
/// type and amount as one string (what a repeat must match). Returns
/// {balance, again}: again = 0 credited now, 1 credited a second
/// time (incident), 2 a repeat answered with the first receipt, 3 a repeat with other
/// fields (refused, incident).
const LEDGER_LUA: &str = r"
if ARGV[5] == '1' and redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then
  local first = redis.call('HGET', KEYS[5], ARGV[3])
  if first and first ~= ARGV[6] then
    redis.call('INCR', KEYS[3])
    return {0, 3}
  end
  redis.call('INCR', KEYS[4])
  return {0, 2}
end
local again = 0
if redis.call('HSET', KEYS[2], ARGV[3], ARGV[4]) == 0 then
  again = 1
  redis.call('INCR', KEYS[3])
end
if ARGV[5] == '1' then redis.call('HSET', KEYS[5], ARGV[3], ARGV[6]) end
local balance = redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
return {balance, again}
";

/// The longest a ledger call waits for Redis before answering `Timeout`.
pub const LEDGER_TIMEOUT: Duration = Duration::from_secs(5);

/// What the ledger holds for one user (see [`Ledger::account`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Account {
    /// Reward type → balance.
    pub balances: HashMap<String, i64>,
    /// Credited trade number → credit time (Unix ms).
    pub credited: HashMap<String, i64>,
    /// Times a trade number was credited again (or repeated with other fields).
    pub double_credits: i64,
    /// Repeats answered with the first receipt (a ledger that honours the key).
    pub repeats: i64,
}

/// The built-in Redis wallet: a balance per user and reward type, and the set of
/// trade numbers it has credited (see the module doc).
#[derive(Clone)]
pub struct Ledger {
    client: Client,
    prefix: String,
    script: Script,
    limits: Arc<HashMap<String, DefaultDirectRateLimiter>>,
    incidents: Arc<AtomicU64>,
    honours_key: bool,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("prefix", &self.prefix)
            .field("honours_key", &self.honours_key)
            .field("limited_types", &self.limits.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn unavailable(e: fred::error::Error) -> CreditError {
    let code = if e.kind() == &fred::error::ErrorKind::Timeout {
        ErrorCode::Timeout
    } else {
        ErrorCode::Unavailable
    };
    CreditError::new(code, e.to_string())
}

impl Ledger {
    /// Connects; `capacity` maps reward types to credits per second (types not named
    /// are unlimited). The ledger starts strict (does not honour the key).
    pub async fn connect(
        redis_url: &str,
        prefix: &str,
        capacity: &HashMap<String, NonZeroU32>,
    ) -> Result<Self, CreditError> {
        let client = Builder::from_config(Config::from_url(redis_url).map_err(unavailable)?)
            .with_performance_config(|p| p.default_command_timeout = LEDGER_TIMEOUT)
            .build()
            .map_err(unavailable)?;
        client.init().await.map_err(unavailable)?;
        let script = Script::load(&client, LEDGER_LUA)
            .await
            .map_err(unavailable)?;
        let limits = capacity
            .iter()
            .map(|(t, per_sec)| (t.clone(), RateLimiter::direct(Quota::per_second(*per_sec))))
            .collect();
        Ok(Self {
            client,
            prefix: prefix.to_string(),
            script,
            limits: Arc::new(limits),
            incidents: Arc::new(AtomicU64::new(0)),
            honours_key: false,
        })
    }

    /// Honours the idempotency key from now on, as a real wallet does (module doc).
    pub fn honouring_key(mut self, yes: bool) -> Self {
        self.honours_key = yes;
        self
    }

    /// Double credits seen by this ledger instance since start.
    pub fn double_credits(&self) -> u64 {
        self.incidents.load(Ordering::Relaxed)
    }

    /// A user's balance of a reward type.
    pub async fn balance(&self, user_id: &str, reward_type: &str) -> Result<i64, CreditError> {
        let v: Option<i64> = self
            .client
            .hget(self.balance_key(user_id), reward_type)
            .await
            .map_err(unavailable)?;
        Ok(v.unwrap_or(0))
    }

    /// Everything the ledger holds for a user: balances, credited trade numbers with
    /// their credit times, and the double-credit and repeat counts (for
    /// reconciliation).
    pub async fn account(&self, user_id: &str) -> Result<Account, CreditError> {
        let (balances, credited, double_credits, repeats): (_, _, Option<i64>, Option<i64>) =
            tokio::try_join!(
                self.client.hgetall(self.balance_key(user_id)),
                self.client.hgetall(self.credited_key(user_id)),
                self.client.get(self.incidents_key(user_id)),
                self.client.get(self.repeats_key(user_id)),
            )
            .map_err(unavailable)?;
        Ok(Account {
            balances,
            credited,
            double_credits: double_credits.unwrap_or(0),
            repeats: repeats.unwrap_or(0),
        })
    }

    fn balance_key(&self, user_id: &str) -> String {
        format!("{}:ledger:{{{user_id}}}:balance", self.prefix)
    }

    fn credited_key(&self, user_id: &str) -> String {
        format!("{}:ledger:{{{user_id}}}:credited", self.prefix)
    }

    fn incidents_key(&self, user_id: &str) -> String {
        format!("{}:ledger:{{{user_id}}}:double_credits", self.prefix)
    }

    fn repeats_key(&self, user_id: &str) -> String {
        format!("{}:ledger:{{{user_id}}}:repeats", self.prefix)
    }

    fn receipts_key(&self, user_id: &str) -> String {
        format!("{}:ledger:{{{user_id}}}:fields", self.prefix)
    }

    /// What is refused before Redis is asked: a malformed credit, or one over its
    /// reward type's capacity. Nothing was credited.
    fn precheck(&self, c: &Credit) -> Result<(), CreditError> {
        if c.user_id.is_empty() || c.user_id.contains(['{', '}']) || c.amount <= 0 {
            return Err(CreditError::not_credited(
                ErrorCode::Invalid,
                "user id must be set without braces, amount positive",
            ));
        }
        if let Some(limit) = self.limits.get(&c.reward_type)
            && limit.check().is_err()
        {
            return Err(CreditError::not_credited(
                ErrorCode::RateLimited,
                format!("{} over its capacity", c.reward_type),
            ));
        }
        Ok(())
    }

    fn keys(&self, c: &Credit) -> Vec<String> {
        vec![
            self.balance_key(&c.user_id),
            self.credited_key(&c.user_id),
            self.incidents_key(&c.user_id),
            self.repeats_key(&c.user_id),
            self.receipts_key(&c.user_id),
        ]
    }

    fn args(&self, c: &Credit, now: i64) -> Vec<Value> {
        vec![
            Value::from(c.reward_type.as_str()),
            Value::from(c.amount),
            Value::from(c.trade_no.as_str()),
            Value::from(now),
            Value::from(if self.honours_key { "1" } else { "0" }),
            // Only a ledger that honours the key compares a repeat's fields.
            Value::from(if self.honours_key {
                Self::fields(c)
            } else {
                String::new()
            }),
        ]
    }

    /// What a repeat of a credit must match.
    fn fields(c: &Credit) -> String {
        format!("{}\u{1f}{}\u{1f}{}", c.user_id, c.reward_type, c.amount)
    }

    fn receipt(c: &Credit) -> Receipt {
        format!("ledger:{}", c.trade_no)
    }

    /// The receipt for Redis's answer to one credit's script call.
    fn settle(
        &self,
        c: &Credit,
        reply: Result<Vec<i64>, fred::error::Error>,
    ) -> Result<Receipt, CreditError> {
        let reply = reply.map_err(unavailable)?;
        let again = reply.get(1).copied();
        match again {
            Some(0 | 2) => Ok(Self::receipt(c)),
            Some(1) => {
                self.incidents.fetch_add(1, Ordering::Relaxed);
                Ok(Self::receipt(c))
            }
            Some(3) => {
                self.incidents.fetch_add(1, Ordering::Relaxed);
                Err(CreditError::not_credited(
                    ErrorCode::Invalid,
                    "idempotency key reused with another user, type or amount",
                ))
            }
            _ => Err(CreditError::new(
                ErrorCode::Unavailable,
                format!("unexpected ledger reply {reply:?}"),
            )),
        }
    }

    async fn credit_now(&self, c: &Credit) -> Result<Receipt, CreditError> {
        self.precheck(c)?;
        let now = now_ms();
        let reply = self
            .script
            .eval(&self.client, || (self.keys(c), self.args(c, now)))
            .await;
        self.settle(c, reply)
    }

    /// Many credits in one pipeline: still one script call per credit (each its own
    /// balance change, double-credit check and answer, as a wallet API takes them),
    /// but one write and one read on the connection instead of one each per credit.
    async fn credit_batch(&self, cs: &[Credit]) -> Vec<Result<Receipt, CreditError>> {
        let mut out: Vec<Option<Result<Receipt, CreditError>>> =
            cs.iter().map(|c| self.precheck(c).err().map(Err)).collect();
        let send: Vec<usize> = (0..cs.len()).filter(|&i| out[i].is_none()).collect();
        let now = now_ms();
        let replies = self.pipelined(cs, &send, now).await;
        for (&i, reply) in send.iter().zip(replies) {
            out[i] = Some(self.settle(&cs[i], reply));
        }
        out.into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    Err(CreditError::new(
                        ErrorCode::Unavailable,
                        "ledger pipeline gave no answer",
                    ))
                })
            })
            .collect()
    }

    /// Sends the credits `which` of `cs` as one pipeline; one answer per credit.
    async fn pipelined(
        &self,
        cs: &[Credit],
        which: &[usize],
        now: i64,
    ) -> Vec<Result<Vec<i64>, fred::error::Error>> {
        let calls = which
            .iter()
            .map(|&i| {
                let c = &cs[i];
                let keys = self.keys(c);
                let mut call: Vec<Value> = vec![Value::from(keys.len() as i64)];
                call.extend(keys.into_iter().map(Value::from));
                call.extend(self.args(c, now));
                call
            })
            .collect::<Vec<_>>();
        self.script.eval_pipeline(&self.client, &calls).await
    }

    async fn status_now(&self, c: &Credit) -> Result<CreditStatus, CreditError> {
        let at: Option<i64> = self
            .client
            .hget(self.credited_key(&c.user_id), c.trade_no.as_str())
            .await
            .map_err(unavailable)?;
        Ok(match at {
            Some(_) => CreditStatus::Credited(Self::receipt(c)),
            None => CreditStatus::NotCredited,
        })
    }
}

impl Downstream for Ledger {
    fn credit<'a>(&'a self, c: &'a Credit) -> CreditFuture<'a> {
        Box::pin(self.credit_now(c))
    }

    fn credit_many<'a>(&'a self, cs: &'a [Credit]) -> CreditManyFuture<'a> {
        Box::pin(self.credit_batch(cs))
    }

    fn contract(&self) -> Contract {
        Contract {
            honours_key: self.honours_key,
            status: true,
            max_call_ms: u64::try_from(LEDGER_TIMEOUT.as_millis()).unwrap_or(u64::MAX),
        }
    }

    fn status<'a>(&'a self, c: &'a Credit) -> StatusFuture<'a> {
        Box::pin(self.status_now(c))
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

/// A downstream reached over HTTP: each credit is a `POST` of JSON
/// `{trade_no, user_id, reward_type, amount}` to one URL, with the trade number in the
/// `Idempotency-Key` header.
///
/// | answer | becomes |
/// | --- | --- |
/// | 2xx | credited; the receipt is the body's `ref` field, else the trade number |
/// | no answer within the timeout, connection reset | [`ErrorCode::Timeout`] / [`ErrorCode::Unavailable`], **in doubt** |
/// | connection refused (nothing sent) | [`ErrorCode::Unavailable`], not credited |
/// | 5xx with body `{"code": "NOT_CREDITED"}` | [`ErrorCode::Unavailable`], not credited |
/// | any other 5xx | [`ErrorCode::Unavailable`], in doubt |
/// | 409 (the key is in use by a request still running) | [`ErrorCode::KeyInUse`], in doubt, retryable |
/// | 429 | [`ErrorCode::RateLimited`], not credited |
/// | 3xx (never followed: a wallet may redirect after crediting) | [`ErrorCode::Unavailable`], in doubt |
/// | 401, 403, 404, 405 | [`ErrorCode::Unavailable`], not credited (a configuration fault: retried, never failed) |
/// | 4xx with body `{"code": "ACCOUNT_CLOSED"}` | [`ErrorCode::AccountClosed`] |
/// | any other 4xx | [`ErrorCode::Invalid`] |
///
/// With a status URL, `GET {status_url}?trade_no=..&user_id=..` must answer 200 with
/// `{"state": "CREDITED", "ref": ...}` or `{"state": "NOT_CREDITED"}`; anything else
/// (a 404 included: it may be a wrong route) leaves the credit in doubt.
///
/// Classification reads the status and the `code`/`state` fields only, never message
/// text. A user name or password in either URL is used but never shown: errors name
/// the URL without them.
#[derive(Debug, Clone)]
pub struct Http {
    client: reqwest::Client,
    url: reqwest::Url,
    status_url: Option<reqwest::Url>,
    honours_key: bool,
    timeout: Duration,
}

/// How an HTTP downstream is reached and what it promises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpOptions {
    /// Per-call timeout.
    pub timeout: Duration,
    /// The downstream credits a repeated `Idempotency-Key` once.
    pub honours_key: bool,
    /// Where to ask whether a trade number was credited.
    pub status_url: Option<String>,
}

fn parse_url(what: &str, url: &str) -> Result<reqwest::Url, String> {
    // The text may hold a password: never echo it.
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{what}: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("{what} {}: not http(s)", redacted(&parsed)));
    }
    Ok(parsed)
}

impl Http {
    /// A downstream at `url`, each call bounded by `timeout`, with no idempotency key
    /// honoured and no status route (the weakest contract).
    pub fn new(url: &str, timeout: Duration) -> Result<Self, String> {
        Self::with_options(
            url,
            &HttpOptions {
                timeout,
                honours_key: false,
                status_url: None,
            },
        )
    }

    /// The downstream a config entry describes (`Http` entries only).
    pub fn with_options_of(d: &crate::config::DownstreamConfig) -> Result<Self, String> {
        match d {
            crate::config::DownstreamConfig::Http {
                url,
                timeout_ms,
                honours_key,
                status_url,
            } => Self::with_options(
                url,
                &HttpOptions {
                    timeout: Duration::from_millis(*timeout_ms),
                    honours_key: *honours_key,
                    status_url: status_url.clone(),
                },
            ),
            crate::config::DownstreamConfig::Ledger { .. } => {
                Err("a ledger is not an HTTP downstream".into())
            }
        }
    }

    /// A downstream at `url` with the given contract.
    pub fn with_options(url: &str, o: &HttpOptions) -> Result<Self, String> {
        let url = parse_url("downstream url", url)?;
        let status_url = match &o.status_url {
            Some(s) => Some(parse_url("downstream status_url", s)?),
            None => None,
        };
        // A redirect would turn the POST into a GET elsewhere: never followed.
        let client = reqwest::Client::builder()
            .timeout(o.timeout)
            .connect_timeout(o.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("http client: {e}"))?;
        Ok(Self {
            client,
            url,
            status_url,
            honours_key: o.honours_key,
            timeout: o.timeout,
        })
    }

    /// A transport error: in doubt unless the connection never opened.
    fn transport(&self, url: &reqwest::Url, what: &str, e: &reqwest::Error) -> CreditError {
        // reqwest's error text can carry the URL: describe it ourselves.
        let kind = if e.is_timeout() {
            "timed out"
        } else if e.is_connect() {
            "could not connect"
        } else {
            "connection failed"
        };
        let detail = format!("{what} {}: {kind}", redacted(url));
        if e.is_timeout() {
            CreditError::new(ErrorCode::Timeout, detail)
        } else if e.is_connect() && what == "POST" {
            CreditError::not_credited(ErrorCode::Unavailable, detail)
        } else {
            CreditError::new(ErrorCode::Unavailable, detail)
        }
    }

    async fn credit_now(&self, c: &Credit) -> Result<Receipt, CreditError> {
        let body = serde_json::json!({
            "trade_no": c.trade_no,
            "user_id": c.user_id,
            "reward_type": c.reward_type,
            "amount": c.amount,
        });
        let resp = self
            .client
            .post(self.url.clone())
            .header("Idempotency-Key", &c.trade_no)
            .json(&body)
            .send()
            .await
            .map_err(|e| self.transport(&self.url, "POST", &e))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| self.transport(&self.url, "POST (reading the answer)", &e))?;
        let json: Option<serde_json::Value> = serde_json::from_str(&text).ok();
        let field = |name: &str| {
            json.as_ref()
                .and_then(|j| j.get(name))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        if status.is_success() {
            return Ok(field("ref").unwrap_or_else(|| c.trade_no.clone()));
        }
        let mut shown = text;
        shown.truncate(shown.floor_char_boundary(200));
        let detail = format!("POST {} answered {status}: {shown}", redacted(&self.url));
        Err(match status.as_u16() {
            400..=499 if field("code").as_deref() == Some("ACCOUNT_CLOSED") => {
                CreditError::not_credited(ErrorCode::AccountClosed, detail)
            }
            // A redirect is never followed, but a wallet may answer 303 after it has
            // credited (post-redirect-get): in doubt.
            300..=399 => CreditError::new(ErrorCode::Unavailable, detail),
            // A rotated credential or a wrong route: the configuration's fault, not the
            // grant's; nothing was credited, so it waits and retries.
            401 | 403 | 404 | 405 => CreditError::not_credited(ErrorCode::Unavailable, detail),
            429 => CreditError::not_credited(ErrorCode::RateLimited, detail),
            408 => CreditError::new(ErrorCode::Timeout, detail),
            409 => CreditError::new(ErrorCode::KeyInUse, detail),
            400..=499 => CreditError::not_credited(ErrorCode::Invalid, detail),
            _ if field("code").as_deref() == Some("NOT_CREDITED") => {
                CreditError::not_credited(ErrorCode::Unavailable, detail)
            }
            _ => CreditError::new(ErrorCode::Unavailable, detail),
        })
    }

    async fn status_now(&self, c: &Credit) -> Result<CreditStatus, CreditError> {
        let Some(url) = &self.status_url else {
            return Err(CreditError::new(
                ErrorCode::Unavailable,
                "this downstream has no status_url",
            ));
        };
        let mut asked = url.clone();
        asked
            .query_pairs_mut()
            .append_pair("trade_no", &c.trade_no)
            .append_pair("user_id", &c.user_id);
        let resp = self
            .client
            .get(asked)
            .send()
            .await
            .map_err(|e| self.transport(url, "GET", &e))?;
        let status = resp.status();
        let json: Option<serde_json::Value> = resp.json().await.ok();
        let field = |name: &str| {
            json.as_ref()
                .and_then(|j| j.get(name))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        match (status.as_u16(), field("state").as_deref()) {
            (200, Some("CREDITED")) => Ok(CreditStatus::Credited(
                field("ref").unwrap_or_else(|| c.trade_no.clone()),
            )),
            (200, Some("NOT_CREDITED")) => Ok(CreditStatus::NotCredited),
            _ => Err(CreditError::new(
                ErrorCode::Unavailable,
                format!("GET {} answered {status} without a state", redacted(url)),
            )),
        }
    }
}

impl Downstream for Http {
    fn credit<'a>(&'a self, c: &'a Credit) -> CreditFuture<'a> {
        Box::pin(self.credit_now(c))
    }

    fn contract(&self) -> Contract {
        Contract {
            honours_key: self.honours_key,
            status: self.status_url.is_some(),
            max_call_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
        }
    }

    fn status<'a>(&'a self, c: &'a Credit) -> StatusFuture<'a> {
        Box::pin(self.status_now(c))
    }
}
