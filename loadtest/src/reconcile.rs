//! Reconciliation: after a replay (or on its own, `loadtest reconcile <run dir>`),
//! prove from Redis that every reward sent was credited exactly once.
//!
//! Inputs are the run directory's `manifest.json` (where the data lives) and
//! `sent.tsv` (every request the SDK accepted: trade number, user, activity, scene,
//! type, amount, send time, whether its token was stored, whether it was a deliberate
//! repeat). Nothing is taken from the services' own counters: the ledger, the budget
//! shards and the token hashes are read directly.
//!
//! | check | passes when |
//! | --- | --- |
//! | credited once | every distinct sent trade number is in its user's ledger |
//! | nothing extra | the ledger holds no trade number that was not sent |
//! | amounts | each user's balance per type equals the sum of their sent amounts |
//! | no double credit | the ledger's double-credit counters are all zero |
//! | budget | spent per scene equals the credits of that scene, and is within budget |
//! | tokens | every sent trade's token is in the user's pending or credited hash (or its write failure was counted), credited ones moved to the credited hash, no token for a trade not sent |
//!
//! A repeated send must carry the same type and amount as the first (the replay
//! repeats requests verbatim); a mismatch is reported as a conflict.
//!
//! A run whose SDK hosts were killed (`hosts.tsv`, [`crate::replay::hosts`]) marks
//! the rewards a dead host answered or held unanswered. Such a reward whose token is
//! in the store is held to every check above; one with no token and no credit died
//! with its host before its deferred token write: it is counted as **lost with the
//! host** ([`Reconciliation::lost_with_host`]), not as missing, and left out of the
//! expected balances. The `lost with a killed host` row fails when more were lost
//! than the killed hosts can have had unwritten (the bound kept beside the marks).

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead as _;
use std::path::Path;

use reward_service::claim::{ClaimConfig, Claims};
use reward_service::downstream::{Account, Ledger};
use reward_service::tokens::{Held, Tokens};
use serde::Serialize;

use crate::setup::Manifest;

/// One sent reward, as `sent.tsv` has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentReward {
    /// Trade number.
    pub trade_no: String,
    /// User.
    pub user_id: String,
    /// Activity.
    pub activity_id: String,
    /// Scene.
    pub scene_id: String,
    /// Reward type.
    pub reward_type: String,
    /// Amount.
    pub amount: i64,
    /// When `send_reward` was called, Unix ms (the first send, for repeats).
    pub sent_unix_ms: i64,
    /// Whether the token reached the store.
    pub stored: bool,
}

impl SentReward {
    /// The `sent.tsv` line (no newline).
    pub fn line(&self, duplicate: bool) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.trade_no,
            self.user_id,
            self.activity_id,
            self.scene_id,
            self.reward_type,
            self.amount,
            self.sent_unix_ms,
            u8::from(self.stored),
            u8::from(duplicate)
        )
    }

    fn parse(line: &str) -> Option<(Self, bool)> {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 9 {
            return None;
        }
        Some((
            Self {
                trade_no: f[0].to_string(),
                user_id: f[1].to_string(),
                activity_id: f[2].to_string(),
                scene_id: f[3].to_string(),
                reward_type: f[4].to_string(),
                amount: f[5].parse().ok()?,
                sent_unix_ms: f[6].parse().ok()?,
                stored: f[7] == "1",
            },
            f[8] == "1",
        ))
    }
}

/// One row of the PASS/FAIL table.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it held.
    pub pass: bool,
    /// Counts behind the verdict.
    pub detail: String,
}

/// The outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Reconciliation {
    /// The table.
    pub checks: Vec<Check>,
    /// Distinct trade numbers sent.
    pub sent: u64,
    /// Repeated sends of a trade number.
    pub repeats: u64,
    /// Distinct trade numbers credited.
    pub credited: u64,
    /// Sum of sent amounts.
    pub sent_amount: i64,
    /// Sent trade numbers whose token is in neither the pending nor the credited hash.
    pub tokens_missing: u64,
    /// Rewards a killed SDK host answered (or held unanswered) whose token never
    /// reached the store and which nothing credited: they died with the host.
    pub lost_with_host: u64,
    /// Rewards marked by a killed SDK host (accepted or in doubt), credited or not.
    pub host_marked: u64,
    /// Send time (Unix ms) of each of them (for the timeline).
    #[serde(skip)]
    pub tokens_missing_sent_ms: Vec<i64>,
    /// Credit time minus send time of every credited trade, ms (for latency figures).
    #[serde(skip)]
    pub credit_delays_ms: Vec<(i64, i64, String)>,
}

impl Reconciliation {
    /// Every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }

    /// The table as text.
    pub fn table(&self) -> String {
        let mut s = format!("{:<18} {:<6} detail\n", "check", "result");
        for c in &self.checks {
            s.push_str(&format!(
                "{:<18} {:<6} {}\n",
                c.name,
                if c.pass { "PASS" } else { "FAIL" },
                c.detail
            ));
        }
        s
    }
}

/// Reads `sent.tsv`: distinct trade numbers (first send kept) and the repeat count.
pub fn read_sent(dir: &Path) -> anyhow::Result<(BTreeMap<String, SentReward>, u64, u64)> {
    let path = dir.join("sent.tsv");
    let f = std::fs::File::open(&path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let mut sent = BTreeMap::new();
    let mut repeats = 0;
    let mut conflicts = 0;
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line?;
        let (r, _dup) = SentReward::parse(&line)
            .ok_or_else(|| anyhow::anyhow!("{} line {}: malformed", path.display(), i + 1))?;
        match sent.get(&r.trade_no) {
            None => {
                sent.insert(r.trade_no.clone(), r);
            }
            Some(first) => {
                repeats += 1;
                let first: &SentReward = first;
                if first.amount != r.amount
                    || first.reward_type != r.reward_type
                    || first.user_id != r.user_id
                {
                    conflicts += 1;
                }
            }
        }
    }
    Ok((sent, repeats, conflicts))
}

/// How often a replay's final reconciliation is tried before it fails the run.
pub const ATTEMPTS: u32 = 3;

/// [`run`], tried again (2 s apart, up to [`ATTEMPTS`] times) when Redis does not
/// answer: reconciliation only reads, so a read that timed out on a busy machine
/// (beside a replay that overloads it on purpose, or a Redis still loading its AOF)
/// is asked again rather than failing the run. A check that fails is an answer, not
/// an error, and is never retried.
pub async fn run_patiently(dir: &Path) -> anyhow::Result<Reconciliation> {
    let mut attempt = 1;
    loop {
        match run(dir).await {
            Ok(r) => return Ok(r),
            Err(e) if attempt < ATTEMPTS && unanswered(&e) => {
                eprintln!(
                    "reconcile: {e:#}; reading again in 2 s (attempt {attempt} of {ATTEMPTS})"
                );
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether `run` failed because a store did not answer (its errors name the store),
/// not because of the run directory (no manifest, already cleaned).
fn unanswered(e: &anyhow::Error) -> bool {
    let text = format!("{e:#}");
    ["token store:", "ledger:", "claim store:"]
        .iter()
        .any(|p| text.starts_with(p))
}

/// Runs every check against Redis.
pub async fn run(dir: &Path) -> anyhow::Result<Reconciliation> {
    let m = Manifest::load(dir)?;
    if let Some(at) = m.cleaned_unix_ms {
        anyhow::bail!(
            "nothing to reconcile: `loadtest clean` removed this run's keys (at Unix ms {at}); \
             its report.json keeps the result of the reconciliation made after the run"
        );
    }
    let (sent, repeats, conflicts) = read_sent(dir)?;
    let marks = crate::replay::hosts::read_marks(dir)?;
    let (ledger, claims, tokens) = connect(&m).await?;
    let t = tally(&sent, &marks.rewards, &ledger, &tokens).await?;
    let n = sent.len() as u64;
    let mut checks = ledger_checks(&t, n, repeats, conflicts);
    checks.push(budget_check(&m, &claims, &t.credited_by_scope).await?);
    checks.push(tokens_check(&t, &m));
    if !marks.rewards.is_empty() {
        checks.push(Check {
            name: "lost with a killed host".into(),
            pass: t.lost_with_host + t.token_lost_with_host <= marks.bound,
            detail: format!(
                "{} of {} rewards of killed SDK hosts neither stored nor credited, {} credited without their token; at most {} token writes were unfinished in them",
                t.lost_with_host,
                marks.rewards.len(),
                t.token_lost_with_host,
                marks.bound
            ),
        });
    }
    Ok(Reconciliation {
        checks,
        sent: n,
        repeats,
        credited: t.credited,
        sent_amount: sent.values().map(|r| r.amount).sum(),
        tokens_missing: t.token_missing,
        lost_with_host: t.lost_with_host,
        host_marked: marks.rewards.len() as u64,
        credit_delays_ms: t.delays,
        tokens_missing_sent_ms: t.token_missing_sent_ms,
    })
}

/// Connects to the run's ledger, claim store and token store, as its manifest names
/// them.
async fn connect(m: &Manifest) -> anyhow::Result<(Ledger, Claims, Tokens)> {
    let ledger = Ledger::connect(&m.redis_url, &m.ledger_prefix, &HashMap::new())
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
struct Tally {
    missing: u64,
    extra: u64,
    wrong_balance: u64,
    doubles: i64,
    credited: u64,
    token_missing: u64,
    token_missing_sent_ms: Vec<i64>,
    lost_with_host: u64,
    /// Credited rewards of a killed host whose token write died with it (the event
    /// got through; the user's pending list never showed it).
    token_lost_with_host: u64,
    token_unmoved: u64,
    token_unsent: u64,
    credited_by_scope: BTreeMap<String, i64>,
    delays: Vec<(i64, i64, String)>,
    examples: Vec<String>,
}

/// Reads every user's account and token hashes (256 users at a time) and tallies them
/// against the trades sent to that user.
async fn tally(
    sent: &BTreeMap<String, SentReward>,
    marks: &HashMap<String, bool>,
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
        marks: &HashMap<String, bool>,
    ) {
        self.doubles += account.double_credits;
        let mut want_balance: BTreeMap<&str, i64> = BTreeMap::new();
        for r in rs {
            let pending = held.iter().any(|h| h.pending.contains_key(&r.trade_no));
            let moved = held.iter().any(|h| h.credited.contains_key(&r.trade_no));
            let credited = account.credited.contains_key(&r.trade_no);
            if !credited && !pending && !moved && marks.contains_key(&r.trade_no) {
                // Died with its SDK host before its token write: nothing holds it.
                self.lost_with_host += 1;
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
            if !pending && !moved && r.stored && marks.contains_key(&r.trade_no) {
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

/// The ledger's checks: credited once, nothing extra, amounts, no double credit.
fn ledger_checks(t: &Tally, n: u64, repeats: u64, conflicts: u64) -> Vec<Check> {
    let (credited, missing, extra, wrong_balance, doubles) =
        (t.credited, t.missing, t.extra, t.wrong_balance, t.doubles);
    let examples = &t.examples;
    vec![
        Check {
            name: "credited once".into(),
            pass: missing == 0 && conflicts == 0,
            detail: format!(
                "{credited} of {n} trade numbers credited ({repeats} repeated sends); {missing} missing{}{}",
                if examples.is_empty() {
                    String::new()
                } else {
                    format!(" e.g. {}", examples.join(", "))
                },
                if conflicts > 0 {
                    format!("; {conflicts} repeats with another type/amount/user")
                } else {
                    String::new()
                }
            ),
        },
        Check {
            name: "nothing extra".into(),
            pass: extra == 0,
            detail: format!("{extra} credited trade numbers that were never sent"),
        },
        Check {
            name: "amounts".into(),
            pass: wrong_balance == 0,
            detail: format!("{wrong_balance} user balances differ from the sum sent"),
        },
        Check {
            name: "no double credit".into(),
            pass: doubles == 0,
            detail: format!("{doubles} double-credit incidents in the ledger"),
        },
    ]
}

/// The budget check: per scene, spent (read from the claim store) equals the credits
/// of that scene and is within its budget.
async fn budget_check(
    m: &Manifest,
    claims: &Claims,
    credited_by_scope: &BTreeMap<String, i64>,
) -> anyhow::Result<Check> {
    let mut budget_ok = true;
    let mut budget_detail = Vec::new();
    for (scope, budget) in &m.budgets {
        let spent = claims
            .spent(scope)
            .await
            .map_err(|e| anyhow::anyhow!("budget {scope}: {e}"))?;
        let credits = credited_by_scope.get(scope).copied().unwrap_or(0);
        if spent != credits || spent > *budget {
            budget_ok = false;
        }
        budget_detail.push(format!(
            "{scope}: spent {spent}, credited {credits}, budget {budget}"
        ));
    }
    Ok(Check {
        name: "budget".into(),
        pass: budget_ok,
        detail: budget_detail.join("; "),
    })
}

/// The tokens check: no sent trade without its token (beyond the write failures
/// counted), no token for a trade not sent.
fn tokens_check(t: &Tally, m: &Manifest) -> Check {
    let (token_missing, token_unmoved, token_unsent) =
        (t.token_missing, t.token_unmoved, t.token_unsent);
    Check {
        name: "tokens".into(),
        pass: token_missing <= m.token_write_failures && token_unsent == 0,
        detail: format!(
            "{token_missing} sent without a stored token ({} write failures counted), {token_unmoved} credited still pending (move failed), {token_unsent} tokens for trades not sent{}",
            m.token_write_failures,
            if t.lost_with_host > 0 {
                format!("; {} lost with a killed SDK host", t.lost_with_host)
            } else {
                String::new()
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_store_that_did_not_answer_is_asked_again() {
        for text in [
            "token store: Timeout Error: Request timed out.",
            "ledger: IO",
            "claim store: x",
        ] {
            assert!(unanswered(&anyhow::anyhow!("{text}")), "{text}");
        }
        for text in [
            "nothing to reconcile: the run was cleaned",
            "manifest.json: not found",
        ] {
            assert!(!unanswered(&anyhow::anyhow!("{text}")), "{text}");
        }
    }
}
