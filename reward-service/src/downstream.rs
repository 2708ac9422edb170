//! Downstream systems that really credit a reward (wallets, coupon systems), behind one
//! trait, and the built-in Redis [`Ledger`].
//!
//! # Errors are classified by code
//! A downstream failure carries an [`ErrorCode`]; whether it is worth retrying is a
//! property of the code ([`ErrorCode::retryable`]), never of the message text, which
//! downstream teams reword at will.
//!
//! # The ledger is deliberately not idempotent
//! It credits whatever it is asked to. When it sees a trade number it has already
//! credited, it credits again and counts a **double-credit incident**. The service's
//! own idempotency (the claim store) is what must keep that count at zero, and tests
//! read it to prove so. The count lives in Redis too (a counter per user beside the
//! balance, same hash tag), so a reconciliation run by another process sees it.
//!
//! The credited trade numbers are a hash, trade number → credit time (Unix ms, the
//! service's clock), so the load tester can measure send-to-credit latency of every
//! reward after a replay without sampling. An optional capacity per reward type (credits per second)
//! answers `RateLimited` above it, to stand in for the weakest downstream (the brief's
//! 2 000 TPS).
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

use fred::prelude::*;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

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
    /// The downstream failed (5xx, connection refused).
    Unavailable,
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
            ErrorCode::Invalid => "INVALID",
            ErrorCode::AccountClosed => "ACCOUNT_CLOSED",
        }
    }

    /// Whether the same credit may succeed if sent again later.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::Timeout | ErrorCode::RateLimited | ErrorCode::Unavailable
        )
    }
}

/// A downstream's refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("downstream {code:?}: {detail}")]
pub struct CreditError {
    /// What kind of failure (decides retry).
    pub code: ErrorCode,
    /// For logs and the failure archive.
    pub detail: String,
}

/// What a successful credit returns (stored as the grant's result).
pub type Receipt = String;

/// A boxed credit future (the trait is used as `dyn`, one per reward type).
pub type CreditFuture<'a> = Pin<Box<dyn Future<Output = Result<Receipt, CreditError>> + Send + 'a>>;

/// A boxed future of many credits' answers, in the order asked.
pub type CreditManyFuture<'a> =
    Pin<Box<dyn Future<Output = Vec<Result<Receipt, CreditError>>> + Send + 'a>>;

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
}

/// KEYS: balance hash, credited hash, incident counter. ARGV: reward type, amount, trade no, now (Unix
/// ms). Returns the new balance and 1 if the trade number had been credited before.
const LEDGER_LUA: &str = r"
local again = 0
if redis.call('HSET', KEYS[2], ARGV[3], ARGV[4]) == 0 then
  again = 1
  redis.call('INCR', KEYS[3])
end
local balance = redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
return {balance, again}
";

/// What the ledger holds for one user (see [`Ledger::account`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Account {
    /// Reward type → balance.
    pub balances: HashMap<String, i64>,
    /// Credited trade number → credit time (Unix ms).
    pub credited: HashMap<String, i64>,
    /// Times a trade number was credited again.
    pub double_credits: i64,
}

/// The built-in Redis wallet: a balance per user and reward type, and the set of
/// trade numbers it has credited (see the module doc).
#[derive(Clone)]
pub struct Ledger {
    client: Client,
    prefix: String,
    sha: Arc<String>,
    limits: Arc<HashMap<String, DefaultDirectRateLimiter>>,
    incidents: Arc<AtomicU64>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("prefix", &self.prefix)
            .field("limited_types", &self.limits.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Ledger {
    /// Connects; `capacity` maps reward types to credits per second (types not named
    /// are unlimited).
    pub async fn connect(
        redis_url: &str,
        prefix: &str,
        capacity: &HashMap<String, NonZeroU32>,
    ) -> Result<Self, CreditError> {
        let unavailable = |e: fred::error::Error| CreditError {
            code: ErrorCode::Unavailable,
            detail: e.to_string(),
        };
        let client = Builder::from_config(Config::from_url(redis_url).map_err(unavailable)?)
            .build()
            .map_err(unavailable)?;
        client.init().await.map_err(unavailable)?;
        let sha: String = client.script_load(LEDGER_LUA).await.map_err(unavailable)?;
        let limits = capacity
            .iter()
            .map(|(t, per_sec)| (t.clone(), RateLimiter::direct(Quota::per_second(*per_sec))))
            .collect();
        Ok(Self {
            client,
            prefix: prefix.to_string(),
            sha: Arc::new(sha),
            limits: Arc::new(limits),
            incidents: Arc::new(AtomicU64::new(0)),
        })
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
            .map_err(|e| CreditError {
                code: ErrorCode::Unavailable,
                detail: e.to_string(),
            })?;
        Ok(v.unwrap_or(0))
    }

    /// Everything the ledger holds for a user: balances, credited trade numbers with
    /// their credit times, and the double-credit count (for reconciliation).
    pub async fn account(&self, user_id: &str) -> Result<Account, CreditError> {
        let unavailable = |e: fred::error::Error| CreditError {
            code: ErrorCode::Unavailable,
            detail: e.to_string(),
        };
        let (balances, credited, double_credits): (_, _, Option<i64>) = tokio::try_join!(
            self.client.hgetall(self.balance_key(user_id)),
            self.client.hgetall(self.credited_key(user_id)),
            self.client.get(self.incidents_key(user_id)),
        )
        .map_err(unavailable)?;
        let double_credits = double_credits.unwrap_or(0);
        Ok(Account {
            balances,
            credited,
            double_credits,
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

    /// What is refused before Redis is asked: a malformed credit, or one over its
    /// reward type's capacity.
    fn precheck(&self, c: &Credit) -> Result<(), CreditError> {
        if c.user_id.is_empty() || c.user_id.contains(['{', '}']) || c.amount <= 0 {
            return Err(CreditError {
                code: ErrorCode::Invalid,
                detail: "user id must be set without braces, amount positive".into(),
            });
        }
        if let Some(limit) = self.limits.get(&c.reward_type)
            && limit.check().is_err()
        {
            return Err(CreditError {
                code: ErrorCode::RateLimited,
                detail: format!("{} over its capacity", c.reward_type),
            });
        }
        Ok(())
    }

    fn keys(&self, c: &Credit) -> Vec<String> {
        vec![
            self.balance_key(&c.user_id),
            self.credited_key(&c.user_id),
            self.incidents_key(&c.user_id),
        ]
    }

    fn args(c: &Credit, now: i64) -> Vec<Value> {
        vec![
            Value::from(c.reward_type.as_str()),
            Value::from(c.amount),
            Value::from(c.trade_no.as_str()),
            Value::from(now),
        ]
    }

    /// The receipt for Redis's answer to one credit's script call.
    fn settle(
        &self,
        c: &Credit,
        reply: Result<Vec<i64>, fred::error::Error>,
    ) -> Result<Receipt, CreditError> {
        let reply = reply.map_err(|e| CreditError {
            code: if e.kind() == &fred::error::ErrorKind::Timeout {
                ErrorCode::Timeout
            } else {
                ErrorCode::Unavailable
            },
            detail: e.to_string(),
        })?;
        match reply.as_slice() {
            [balance, again] => {
                if *again == 1 {
                    self.incidents.fetch_add(1, Ordering::Relaxed);
                }
                Ok(format!("ledger:{}:{balance}", c.trade_no))
            }
            _ => Err(CreditError {
                code: ErrorCode::Unavailable,
                detail: format!("unexpected ledger reply {reply:?}"),
            }),
        }
    }

    async fn credit_now(&self, c: &Credit) -> Result<Receipt, CreditError> {
        self.precheck(c)?;
        let now = crate::grant::now_ms();
        let reply = crate::eval_loaded(&self.client, &self.sha, LEDGER_LUA, || {
            (self.keys(c), Self::args(c, now))
        })
        .await;
        self.settle(c, reply)
    }

    /// Many credits in one pipeline: still one script call per credit (each its own
    /// balance change, double-credit check and answer, as a wallet API takes them),
    /// but one write and one read on the connection instead of one each per credit.
    /// On this 2-core stack that round trip per credit, in this process and in
    /// Redis, was a large part of what a credit cost (BENCHMARKS.md, consumer
    /// throughput, session 13).
    async fn credit_batch(&self, cs: &[Credit]) -> Vec<Result<Receipt, CreditError>> {
        let mut out: Vec<Option<Result<Receipt, CreditError>>> =
            cs.iter().map(|c| self.precheck(c).err().map(Err)).collect();
        let send: Vec<usize> = (0..cs.len()).filter(|&i| out[i].is_none()).collect();
        let now = crate::grant::now_ms();
        let mut replies = self.pipelined(cs, &send, now).await;
        // Redis restarted and lost its script cache: load it, send those again.
        // (Positions in `replies`, which follows `send`.)
        let lost: Vec<usize> = (0..replies.len())
            .filter(|&p| matches!(&replies[p], Err(e) if e.details().starts_with("NOSCRIPT")))
            .collect();
        if !lost.is_empty() {
            let which: Vec<usize> = lost.iter().map(|&p| send[p]).collect();
            let again = match self.client.script_load::<String, _>(LEDGER_LUA).await {
                Ok(_) => self.pipelined(cs, &which, now).await,
                Err(e) => which.iter().map(|_| Err(e.clone())).collect(),
            };
            for (p, a) in lost.into_iter().zip(again) {
                replies[p] = a;
            }
        }
        for (&i, reply) in send.iter().zip(replies) {
            out[i] = Some(self.settle(&cs[i], reply));
        }
        out.into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    Err(CreditError {
                        code: ErrorCode::Unavailable,
                        detail: "ledger pipeline gave no answer".into(),
                    })
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
                let mut call: Vec<Value> = vec![Value::from(3_i64)];
                call.extend(self.keys(c).into_iter().map(Value::from));
                call.extend(Self::args(c, now));
                call
            })
            .collect();
        sdk::store::evalsha_pipeline(&self.client, &self.sha, calls).await
    }
}

impl Downstream for Ledger {
    fn credit<'a>(&'a self, c: &'a Credit) -> CreditFuture<'a> {
        Box::pin(self.credit_now(c))
    }

    fn credit_many<'a>(&'a self, cs: &'a [Credit]) -> CreditManyFuture<'a> {
        Box::pin(self.credit_batch(cs))
    }
}

/// A downstream reached over HTTP: each credit is a `POST` of JSON
/// `{trade_no, user_id, reward_type, amount}` to one URL, with the trade number in the
/// `Idempotency-Key` header, so a downstream that honours it credits a repeated call
/// once.
///
/// | answer | becomes |
/// | --- | --- |
/// | 2xx | credited; the receipt is the body's `ref` field, else the trade number |
/// | no answer within the timeout | [`ErrorCode::Timeout`] |
/// | connection refused or reset, 5xx | [`ErrorCode::Unavailable`] |
/// | 429 | [`ErrorCode::RateLimited`] |
/// | 4xx with body `{"code": "ACCOUNT_CLOSED"}` | [`ErrorCode::AccountClosed`] |
/// | any other 4xx | [`ErrorCode::Invalid`] |
///
/// Classification reads the status and the `code` field only, never message text.
#[derive(Debug, Clone)]
pub struct Http {
    client: reqwest::Client,
    url: reqwest::Url,
}

impl Http {
    /// A downstream at `url`, each call bounded by `timeout`.
    pub fn new(url: &str, timeout: std::time::Duration) -> Result<Self, String> {
        let url = reqwest::Url::parse(url).map_err(|e| format!("downstream url {url:?}: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("downstream url {url}: not http(s)"));
        }
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| format!("http client: {e}"))?;
        Ok(Self { client, url })
    }

    async fn credit_now(&self, c: &Credit) -> Result<Receipt, CreditError> {
        let body = serde_json::json!({
            "trade_no": c.trade_no,
            "user_id": c.user_id,
            "reward_type": c.reward_type,
            "amount": c.amount,
        });
        let sent = self
            .client
            .post(self.url.clone())
            .header("Idempotency-Key", &c.trade_no)
            .json(&body)
            .send()
            .await;
        let transport = |what: &str, e: reqwest::Error| CreditError {
            code: if e.is_timeout() {
                ErrorCode::Timeout
            } else {
                ErrorCode::Unavailable
            },
            detail: format!("POST {}{what}: {e}", self.url),
        };
        let resp = sent.map_err(|e| transport("", e))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| transport(" (reading the answer)", e))?;
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
        let code = match status.as_u16() {
            429 => ErrorCode::RateLimited,
            408 => ErrorCode::Timeout,
            400..=499 if field("code").as_deref() == Some("ACCOUNT_CLOSED") => {
                ErrorCode::AccountClosed
            }
            400..=499 => ErrorCode::Invalid,
            _ => ErrorCode::Unavailable,
        };
        let mut detail = text;
        detail.truncate(detail.floor_char_boundary(200));
        Err(CreditError {
            code,
            detail: format!("POST {} answered {status}: {detail}", self.url),
        })
    }
}

impl Downstream for Http {
    fn credit<'a>(&'a self, c: &'a Credit) -> CreditFuture<'a> {
        Box::pin(self.credit_now(c))
    }
}
