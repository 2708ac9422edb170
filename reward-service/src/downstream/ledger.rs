//! The built-in Redis ledger: a wallet that keeps a balance per user and reward type,
//! the trade numbers it has credited, and counts of double credits and repeats.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fred::prelude::*;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use reward_runtime::clock::now_ms;
use reward_runtime::script::Script;

use super::contract::Contract;
use super::credit::{Credit, CreditStatus, Receipt};
use super::error::{CreditError, ErrorCode};
use super::system::{CreditFuture, CreditManyFuture, Downstream, StatusFuture};

/// Credits one or many, each decided as if alone and in order. KEYS: per credit its
/// five keys (balance hash, credited hash, incident counter, repeat counter, receipt
/// hash: one user's, one hash tag). ARGV: now (Unix ms), honour key (1/0), then per
/// credit one argument, its fields packed ([`crate::claim::pack_fields`]): reward type,
/// amount, trade no, and user, type and amount as one string (what a repeat must
/// match). Returns per credit {balance, again}: again = 0 credited now,
/// 1 credited a second time (incident), 2 a repeat answered with the first receipt, 3
/// a repeat with other fields (refused, incident; balance 0 for both repeats), 4
/// refused by Redis (a key of another type under its balance or credited hash: nothing
/// of it written, the others go on). A command Redis refuses past those (the counters,
/// the receipt) fails the call: its credits are then in doubt, and the status query
/// tells each truly.
const LEDGER_LUA: &str = include_str!("lua/ledger.lua");

/// Connections the ledger spreads its calls over (one fred client each, like the
/// claim store's pool): a client stalled by a node's failover or a cluster resync
/// holds up only the calls given to it.
pub const LEDGER_POOL: usize = 4;

/// Most credits in one script call (Redis runs a script to its end before anything
/// else: a call of 200 stays well under a millisecond).
const CREDITS_PER_CALL: usize = 200;

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
    pool: Pool,
    prefix: String,
    script: Script,
    /// Status reads (module doc of reward_runtime::script: a reply proves whose it is).
    hmget: Script,
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
        let pool = reward_runtime::redis::builder(redis_url, LEDGER_TIMEOUT)
            .map_err(unavailable)?
            .build_pool(LEDGER_POOL)
            .map_err(unavailable)?;
        pool.init().await.map_err(unavailable)?;
        // The packed fields' helper first ([`crate::claim::FIELDS_LUA`]).
        let source = format!("{}{LEDGER_LUA}", crate::claim::FIELDS_LUA);
        let script = Script::load(pool.next(), &source)
            .await
            .map_err(unavailable)?;
        let hmget = Script::load(pool.next(), reward_runtime::script::HMGET_LUA)
            .await
            .map_err(unavailable)?;
        let limits = capacity
            .iter()
            .map(|(t, per_sec)| (t.clone(), RateLimiter::direct(Quota::per_second(*per_sec))))
            .collect();
        Ok(Self {
            pool,
            prefix: prefix.to_string(),
            script,
            hmget,
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
            .pool
            .next()
            .hget(self.balance_key(user_id), reward_type)
            .await
            .map_err(unavailable)?;
        Ok(v.unwrap_or(0))
    }

    /// Everything the ledger holds for a user: balances, credited trade numbers with
    /// their credit times, and the double-credit and repeat counts (for
    /// reconciliation).
    pub async fn account(&self, user_id: &str) -> Result<Account, CreditError> {
        let client = self.pool.next();
        let (balances, credited, double_credits, repeats): (_, _, Option<i64>, Option<i64>) =
            tokio::try_join!(
                client.hgetall(self.balance_key(user_id)),
                client.hgetall(self.credited_key(user_id)),
                client.get(self.incidents_key(user_id)),
                client.get(self.repeats_key(user_id)),
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

    fn keys(&self, c: &Credit) -> [String; 5] {
        [
            self.balance_key(&c.user_id),
            self.credited_key(&c.user_id),
            self.incidents_key(&c.user_id),
            self.repeats_key(&c.user_id),
            self.receipts_key(&c.user_id),
        ]
    }

    /// The call's leading arguments: now, and whether the key is honoured.
    fn head(&self, now: i64) -> [Value; 2] {
        [
            Value::from(now),
            Value::from(if self.honours_key { "1" } else { "0" }),
        ]
    }

    /// One credit's arguments: its type, amount, trade number and (only for a ledger
    /// that honours the key, which compares a repeat's) fields, packed into one as the
    /// claim store's batch scripts take theirs ([`crate::claim::pack_fields`]).
    fn args(&self, c: &Credit) -> [Value; 1] {
        let fields = if self.honours_key {
            Self::fields(c)
        } else {
            String::new()
        };
        [Value::Bytes(
            crate::claim::pack_fields(&[
                &c.reward_type,
                &c.amount.to_string(),
                &c.trade_no,
                &fields,
            ])
            .into(),
        )]
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
            // Nothing of it was written, so it is known not credited; it may succeed
            // once the key is mended.
            Some(4) => Err(CreditError::not_credited(
                ErrorCode::Unavailable,
                "the ledger's Redis refused this credit (a key of another type under its balance or credited hash)",
            )),
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
            .eval(self.pool.next(), || {
                let mut args = self.head(now).to_vec();
                args.extend(self.args(c));
                (self.keys(c).to_vec(), args)
            })
            .await;
        self.settle(c, reply)
    }

    /// Many credits in one script call (one per cluster slot, in one pipeline), each
    /// decided and answered as if alone, as a wallet's batch credit API takes them.
    async fn credit_batch(&self, cs: &[Credit]) -> Vec<Result<Receipt, CreditError>> {
        let mut out: Vec<Option<Result<Receipt, CreditError>>> =
            cs.iter().map(|c| self.precheck(c).err().map(Err)).collect();
        let send: Vec<usize> = (0..cs.len()).filter(|&i| out[i].is_none()).collect();
        let now = now_ms();
        let client = self.pool.next();
        let chunks = reward_runtime::redis::slot_chunks(
            client.is_clustered(),
            send.iter().copied(),
            |i| self.balance_key(&cs[i].user_id),
            CREDITS_PER_CALL,
        );
        let calls = chunks
            .iter()
            .map(|chunk| {
                let mut call: Vec<Value> = Vec::with_capacity(3 + chunk.len() * 6);
                call.push(Value::from(chunk.len() as i64 * 5));
                for &i in chunk {
                    call.extend(self.keys(&cs[i]).into_iter().map(Value::from));
                }
                call.extend(self.head(now));
                for &i in chunk {
                    call.extend(self.args(&cs[i]));
                }
                call
            })
            .collect::<Vec<_>>();
        let replies = self.script.eval_pipeline::<Vec<i64>>(client, &calls).await;
        for (chunk, reply) in chunks.iter().zip(replies) {
            match reply {
                Ok(pairs) if pairs.len() == chunk.len() * 2 => {
                    for (&i, pair) in chunk.iter().zip(pairs.chunks(2)) {
                        out[i] = Some(self.settle(&cs[i], Ok(pair.to_vec())));
                    }
                }
                other => {
                    // Redis does not roll a script back: whatever it answered, any
                    // credit of the call may have happened (in doubt).
                    let e = match other {
                        Err(e) => unavailable(e),
                        Ok(pairs) => CreditError::new(
                            ErrorCode::Unavailable,
                            format!("unexpected ledger reply {pairs:?}"),
                        ),
                    };
                    for &i in chunk {
                        out[i] = Some(Err(e.clone()));
                    }
                }
            }
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

    async fn status_now(&self, c: &Credit) -> Result<CreditStatus, CreditError> {
        // Through a script: this read decides whether a credit in doubt happened, so
        // its reply must prove it is this read's (reward_runtime::script).
        let key = self.credited_key(&c.user_id);
        let at: Vec<Option<i64>> = self
            .hmget
            .eval(self.pool.next(), || {
                (vec![key.clone()], vec![Value::from(c.trade_no.as_str())])
            })
            .await
            .map_err(unavailable)?;
        Ok(match at.into_iter().next().flatten() {
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
