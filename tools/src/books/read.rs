//! The stored side of the books: the ledger's accounts, the token hashes and the
//! claim store's budgets, read user by user (256 at a time) and tallied against what
//! was sent.

use std::collections::{BTreeMap, HashMap};

use reward_service::claim::{ClaimConfig, Claims};
use reward_service::downstream::{Account, Ledger};
use reward_service::tokens::{Held, Tokens};

use super::{Marked, SentReward, Stores};

/// Connects to the ledger, claim store and token store that `s` names.
pub(super) async fn connect(m: &Stores) -> anyhow::Result<(Ledger, Claims, Tokens)> {
    let ledger = Ledger::connect(&m.ledger_redis_url, &m.ledger_prefix, &HashMap::new())
        .await
        .map_err(|e| anyhow::anyhow!("ledger: {e}"))?;
    let claims = Claims::connect(
        &m.redis_url,
        ClaimConfig {
            key_prefix: m.claims_prefix.clone(),
            shards: m.claims_shards,
            ..ClaimConfig::default()
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("claim store: {e}"))?;
    let store_cfg = sdk::config::StoreConfig {
        redis_url: m.redis_url.clone(),
        key_prefix: m.token_prefix.clone(),
        // Reading, not serving a caller: a busy Redis gets longer than a write's 2 s.
        timeout_ms: 10_000,
        ..sdk::config::StoreConfig::default()
    };
    let ttl = store_cfg.ttl_secs;
    let store = sdk::store::TokenStore::connect(store_cfg)
        .await
        .map_err(|e| anyhow::anyhow!("token store: {e}"))?;
    let tokens = Tokens::new(store, ttl)
        .await
        .map_err(|e| anyhow::anyhow!("token store: {e}"))?;
    Ok((ledger, claims, tokens))
}

/// What the ledger and the token hashes hold against what was sent, summed over every
/// user.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) missing: u64,
    pub(super) extra: u64,
    pub(super) wrong_balance: u64,
    pub(super) doubles: i64,
    pub(super) credited: u64,
    pub(super) token_missing: u64,
    pub(super) token_missing_sent_ms: Vec<i64>,
    pub(super) lost_with_host: u64,
    /// Of them, calls the host had answered (deferred writes).
    pub(super) lost_answered: u64,
    /// Credited rewards of a killed host whose token write died with it (the event
    /// got through; the user's pending list never showed it).
    pub(super) token_lost_with_host: u64,
    pub(super) token_unmoved: u64,
    pub(super) token_unsent: u64,
    pub(super) credited_by_scope: BTreeMap<String, i64>,
    pub(super) delays: Vec<(i64, i64, String)>,
    pub(super) examples: Vec<String>,
}

/// Reads every user's account and token hashes (256 users at a time) and tallies them
/// against the trades sent to that user.
pub(super) async fn tally(
    sent: &BTreeMap<String, SentReward>,
    marks: &HashMap<String, Marked>,
    ledger: &Ledger,
    tokens: &Tokens,
) -> anyhow::Result<Tally> {
    // Per user: the trades sent to them.
    let mut by_user: BTreeMap<&str, Vec<&SentReward>> = BTreeMap::new();
    for r in sent.values() {
        by_user.entry(r.user_id.as_str()).or_default().push(r);
    }
    let mut t = Tally {
        delays: Vec::with_capacity(sent.len()),
        ..Tally::default()
    };
    let users: Vec<(&str, Vec<&SentReward>)> = by_user.into_iter().collect();
    for chunk in users.chunks(256) {
        let reads = chunk.iter().map(|(u, rs)| read_user(ledger, tokens, u, rs));
        let results = futures_util::future::join_all(reads).await;
        for ((_, rs), result) in chunk.iter().zip(results) {
            let (account, held) = result?;
            t.add_user(rs, &account, &held, marks);
        }
    }
    Ok(t)
}

/// One user's ledger account and token hashes (one per activity of `rs`).
async fn read_user(
    ledger: &Ledger,
    tokens: &Tokens,
    u: &str,
    rs: &[&SentReward],
) -> anyhow::Result<(Account, Vec<Held>)> {
    let account = ledger
        .account(u)
        .await
        .map_err(|e| anyhow::anyhow!("ledger: {e}"))?;
    let mut activities: Vec<&str> = rs.iter().map(|r| r.activity_id.as_str()).collect();
    activities.sort_unstable();
    activities.dedup();
    let mut held = Vec::new();
    for a in activities {
        held.push(
            tokens
                .held(u, a)
                .await
                .map_err(|e| anyhow::anyhow!("token store: {e}"))?,
        );
    }
    anyhow::Ok((account, held))
}

impl Tally {
    /// Adds one user: the trades `rs` sent to them against their `account` and token
    /// hashes `held`.
    fn add_user(
        &mut self,
        rs: &[&SentReward],
        account: &Account,
        held: &[Held],
        marks: &HashMap<String, Marked>,
    ) {
        self.doubles += account.double_credits;
        let mut want_balance: BTreeMap<&str, i64> = BTreeMap::new();
        for r in rs {
            let pending = held.iter().any(|h| h.pending.contains_key(&r.trade_no));
            let moved = held.iter().any(|h| h.credited.contains_key(&r.trade_no));
            let credited = account.credited.contains_key(&r.trade_no);
            // Excusable: the sender died without saying the reward was held (its token
            // stored, or its event acknowledged or spooled).
            let mark = marks.get(&r.trade_no);
            let excusable = mark.filter(|m| !matches!(**m, Marked::Stored | Marked::Queued));
            if !credited
                && !pending
                && !moved
                && let Some(m) = excusable
            {
                // Died with its SDK host before its token write: nothing holds it.
                self.lost_with_host += 1;
                self.lost_answered += u64::from(*m == Marked::Answered);
                continue;
            }
            *want_balance.entry(r.reward_type.as_str()).or_default() += r.amount;
            match account.credited.get(&r.trade_no) {
                Some(at) => {
                    self.credited += 1;
                    *self
                        .credited_by_scope
                        .entry(reward_service::service::scope(&r.activity_id, &r.scene_id))
                        .or_default() += r.amount;
                    self.delays
                        .push((*at, at - r.sent_unix_ms, r.reward_type.clone()));
                }
                None => {
                    self.missing += 1;
                    if self.examples.len() < 5 {
                        self.examples.push(r.trade_no.clone());
                    }
                }
            }
            // A sender that died before its token write landed took the token with it
            // (the reward itself is credited if it was held).
            if !pending && !moved && r.stored && mark.is_some_and(|m| *m != Marked::Stored) {
                self.token_lost_with_host += 1;
            } else if !pending && !moved && r.stored {
                self.token_missing += 1;
                self.token_missing_sent_ms.push(r.sent_unix_ms);
            }
            if pending && account.credited.contains_key(&r.trade_no) {
                self.token_unmoved += 1;
            }
        }
        let sent_here: std::collections::HashSet<&str> =
            rs.iter().map(|r| r.trade_no.as_str()).collect();
        self.extra += account
            .credited
            .keys()
            .filter(|t| !sent_here.contains(t.as_str()))
            .count() as u64;
        for h in held {
            self.token_unsent += h
                .pending
                .keys()
                .chain(h.credited.keys())
                .filter(|t| !sent_here.contains(t.as_str()))
                .count() as u64;
        }
        for (t, want) in &want_balance {
            if account.balances.get(*t).copied().unwrap_or(0) != *want {
                self.wrong_balance += 1;
            }
        }
        if account
            .balances
            .keys()
            .any(|t| !want_balance.contains_key(t.as_str()))
        {
            self.wrong_balance += 1;
        }
    }
}
