//! The live audit (`reward-ctl audit`): the books of a running system, read from its
//! Redis alone (no load tester's files), at a bounded cost.
//!
//! What it checks, each a typed [`Kind`] of finding with a count and examples:
//!
//! | kind | what is wrong | read |
//! | --- | --- | --- |
//! | `granted_without_receipt` | a claim record says `GRANTED` but holds no receipt: a credit nobody can trace to the downstream's transaction | every claim record (`SCAN`, pages of `page` keys, `HMGET`) |
//! | `spent_below_claims` | a scene shard's `spent` is less than the sum of the amounts of its live (`IN_PROGRESS`, `IN_DOUBT`) and `GRANTED` claims: the shard can spend past its cap (a hand edit, a lost budget key) | the budget hash of every scene in every shard, before and after the walk |
//! | `spent_above_claims` | `spent` is more than that sum: records are gone while their money stays counted. Expected once records outlive `[claims] retention_secs` and expire (a ticket, not a page) | same |
//! | `credited_token_pending` | a `GRANTED` reward's token is still pending in its user's hash and no due entry will make the sweeper move it: the wallet shows as waiting what was paid (looked at twice, `recheck` apart) | `HGET` per granted claim, page by page; `ZSCORE` of a suspect's due entry |
//! | `stale_due_entry` | a due index entry older than `stale_after` (the sweeper's grace, plus its retry wait and two passes) whose token is still pending (or whose member does not parse): a stored reward nobody credited. An old entry whose token says credited (a credit whose index removal was lost) or is not in the user's hash (a write that never landed: a refused call's, or one the SDK is still retrying) is owed nothing; the sweeper ends it (`reward-service` `sweeper`), and it is counted in `stale_due_settled`, not as a finding | `ZRANGEBYSCORE` of every due shard, page by page; `HGET` of each old entry's token |
//! | `in_doubt_past_hold` | a grant held `IN_DOUBT` longer than `doubt_hold`: money that may have moved, waiting on an operator | `ZRANGEBYSCORE` of every shard's doubt index |
//!
//! **Bounded cost.** The walk reads claim records `page` keys at a time and never
//! makes more than `keys_per_sec` reads a second (it sleeps between pages; each key a
//! page looks at, claim or not, each record and each token check counts one), on a
//! single Redis or on every
//! primary of a cluster (`reward_runtime::keyspace`); the other checks read one key
//! per shard. The figures for a store of a million claims are in `BENCHMARKS.md`.
//!
//! **A running system moves under the walk.** Claims are created and settled while
//! the pages are read, so a shard's `spent` is judged only when it did not change
//! between the reads before and after the walk (a quiet shard); the others are
//! counted busy and not judged, and the next run looks again (`--every`). A claim and a
//! refund of the same amount during the walk leave `spent` equal while the walk saw
//! one and not the other, and `SCAN` may hand a key over twice (keys are counted
//! once): so a quiet shard whose sums differ is walked again, and reported only if
//! the second walk finds the same difference with `spent` still unchanged.
//!
//! **Budget moves do not touch `spent`.** Borrowing between shards moves `cap` only;
//! `spent` changes in a claim (+amount) and a permanent failure's refund (−amount),
//! both in the record's own shard, so the per-shard sum is the invariant.
//!
//! **Before anything is judged** the stores' shard pins are read (`{claims}:meta`,
//! `{tokens}:due-shards`): a prefix with no store, or a shard count other than the
//! store's, is refused ([`AuditError::Config`]) rather than audited clean.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use fred::prelude::*;
use reward_runtime::keyspace::{nodes, scan_page};
use reward_service::claim::keys as claim_keys;
use sdk::store::keys as token_keys;

/// What to audit and how fast.
#[derive(Debug, Clone)]
pub struct AuditConfig {
    /// The claim store's key prefix (`[claims] key_prefix`).
    pub claims_prefix: String,
    /// Its shard count (`[claims] shards`).
    pub claims_shards: u32,
    /// The token store's key prefix (`[sdk.store] key_prefix`).
    pub token_prefix: String,
    /// The due index's shard count (`[sdk.store] due_shards`).
    pub due_shards: u32,
    /// A due entry older than this is stale: the sweeper's grace, its retry wait and
    /// two of its passes (`[sweeper] grace_ms + retry_ms + 2 × interval_ms`), so
    /// entries it keeps on purpose (budget exhausted, a live claim) are not counted.
    pub stale_after: Duration,
    /// How long an in-doubt grant may wait for an operator before it is a finding.
    pub doubt_hold: Duration,
    /// The scenes with budgets (`activity/scene`).
    pub scenes: Vec<String>,
    /// Redis reads per second at most: each key a `SCAN` page looks at (claim or
    /// not), each record read and each token check counts one.
    pub keys_per_sec: u64,
    /// `SCAN` page size.
    pub page: u32,
    /// Examples kept per kind.
    pub examples: usize,
    /// The wait before a pending token of a granted claim is looked at again.
    pub recheck: Duration,
    /// Suspect pending tokens kept between the two looks (the rest are counted).
    pub max_suspects: usize,
}

impl AuditConfig {
    /// The defaults for the stores of `claims_prefix` and `token_prefix`.
    pub fn new(
        claims_prefix: &str,
        claims_shards: u32,
        token_prefix: &str,
        due_shards: u32,
    ) -> Self {
        Self {
            claims_prefix: claims_prefix.to_string(),
            claims_shards,
            token_prefix: token_prefix.to_string(),
            due_shards,
            stale_after: Duration::from_secs(67),
            doubt_hold: Duration::from_secs(600),
            scenes: Vec::new(),
            keys_per_sec: 50_000,
            page: 1_000,
            examples: 5,
            recheck: Duration::from_secs(2),
            max_suspects: 10_000,
        }
    }
}

/// A kind of inconsistency (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A `GRANTED` claim with no receipt.
    GrantedWithoutReceipt,
    /// A scene shard's `spent` below its claims' sum (it can overspend).
    SpentBelowClaims,
    /// A scene shard's `spent` above its claims' sum (records gone).
    SpentAboveClaims,
    /// A granted reward's token still listed pending.
    CreditedTokenPending,
    /// A due index entry older than the sweeper's grace.
    StaleDueEntry,
    /// An in-doubt grant older than its hold.
    InDoubtPastHold,
}

impl Kind {
    /// Every kind, in report order.
    pub const ALL: [Self; 6] = [
        Self::GrantedWithoutReceipt,
        Self::SpentBelowClaims,
        Self::SpentAboveClaims,
        Self::CreditedTokenPending,
        Self::StaleDueEntry,
        Self::InDoubtPastHold,
    ];

    /// Its name (the `kind` label of `reward_audit_findings`; the catalogue's
    /// `AUDIT_KINDS`, which a test compares).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::GrantedWithoutReceipt => "granted_without_receipt",
            Self::SpentBelowClaims => "spent_below_claims",
            Self::SpentAboveClaims => "spent_above_claims",
            Self::CreditedTokenPending => "credited_token_pending",
            Self::StaleDueEntry => "stale_due_entry",
            Self::InDoubtPastHold => "in_doubt_past_hold",
        }
    }
}

/// One kind's findings.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Finding {
    /// How many.
    pub count: u64,
    /// Up to `examples` of them, each naming the key or trade number and what is off.
    pub examples: Vec<String>,
}

/// What an audit found and what it read.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct AuditReport {
    /// Findings by kind (every kind, 0 when clean).
    pub findings: BTreeMap<Kind, Finding>,
    /// Claim records read.
    pub claims_read: u64,
    /// Scene shards whose `spent` was judged (quiet during the walk).
    pub shards_judged: u64,
    /// Scene shards that changed during the walk (not judged this time).
    pub shards_busy: u64,
    /// Granted rewards pending at the first look past `max_suspects`: not looked at
    /// again, not counted as findings.
    pub suspects_unchecked: u64,
    /// Due entries older than `stale_after` whose token says credited (a credit whose
    /// index removal was lost) or is not stored (a write that never landed): nothing is
    /// owed, the sweeper ends them; not findings.
    pub stale_due_settled: u64,
    /// Wall time of the audit, ms.
    pub took_ms: u64,
}

impl AuditReport {
    /// Whether nothing was found.
    pub fn clean(&self) -> bool {
        self.findings.values().all(|f| f.count == 0)
    }

    fn add(&mut self, kind: Kind, example: String, keep: usize) {
        let f = self.findings.entry(kind).or_default();
        f.count += 1;
        if f.examples.len() < keep {
            f.examples.push(example);
        }
    }

    /// A table for a terminal: one line per kind, then the examples.
    pub fn table(&self) -> String {
        let mut out = String::from("finding                   count  example\n");
        for k in Kind::ALL {
            let f = self.findings.get(&k).cloned().unwrap_or_default();
            out.push_str(&format!(
                "{:<25} {:>6}  {}\n",
                k.as_str(),
                f.count,
                f.examples.first().map_or("-", String::as_str)
            ));
            for e in f.examples.iter().skip(1) {
                out.push_str(&format!("{:<33}{e}\n", ""));
            }
        }
        out.push_str(&format!(
            "read {} claim records in {} ms; budget shards judged {}, busy during the walk {}\n",
            self.claims_read, self.took_ms, self.shards_judged, self.shards_busy
        ));
        if self.suspects_unchecked > 0 {
            out.push_str(&format!(
                "{} more granted rewards had a pending token at the first look and were not looked at again\n",
                self.suspects_unchecked
            ));
        }
        if self.stale_due_settled > 0 {
            out.push_str(&format!(
                "{} old due entries of rewards credited or never stored wait for the sweeper to end them (nothing owed)\n",
                self.stale_due_settled
            ));
        }
        out
    }
}

/// Why an audit could not run.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// Redis refused or did not answer.
    #[error("redis: {0}")]
    Redis(#[from] fred::error::Error),
    /// A setting is unusable.
    #[error("{0}")]
    Config(String),
}

/// A claim record's fields the audit reads, in the order [`read_records`] gives them.
const FIELDS: [&str; 6] = ["scene", "user", "activity", "amount", "state", "result"];

/// A granted reward: user, activity, trade number.
type Reward = (String, String, String);

/// What a walk over the claim records adds up.
#[derive(Default)]
struct Walk {
    /// Live and granted amounts by (shard, scene).
    sums: HashMap<(u32, String), i64>,
    /// Keys seen (hashed): `SCAN` may hand a key over twice.
    seen: std::collections::HashSet<u64>,
    /// Granted rewards whose token was still pending at the first look.
    suspects: Vec<Reward>,
    /// Suspects past `max_suspects`, counted unexamined.
    suspects_over: u64,
    /// Work charged against the read rate (keys a `SCAN` page looks at, records,
    /// token checks).
    units: u64,
}

/// Audits the stores `cfg` names: the claim store through `claims`, the token store
/// through `tokens` (the same client when both live in one Redis); `progress` hears
/// the claim records read so far after each page.
pub async fn audit(
    claims: &Client,
    tokens: &Client,
    cfg: &AuditConfig,
    mut progress: impl FnMut(u64),
) -> Result<AuditReport, AuditError> {
    if cfg.claims_shards == 0 || cfg.due_shards == 0 || cfg.page == 0 {
        return Err(AuditError::Config(
            "shard counts and the page size must be at least 1".into(),
        ));
    }
    check_pins(claims, tokens, cfg).await?;
    let started = Instant::now();
    let keep = cfg.examples;
    let mut report = AuditReport::default();
    for k in Kind::ALL {
        report.findings.insert(k, Finding::default());
    }
    let before = spent_all(claims, cfg).await?;
    let mut walk = Walk::default();
    walk_claims(
        claims,
        tokens,
        cfg,
        None,
        &mut walk,
        &mut report,
        started,
        &mut progress,
    )
    .await?;
    let after = spent_all(claims, cfg).await?;
    // Quiet shards whose sums differ: walked again (those shards only), reported if
    // the difference stands with `spent` still unchanged.
    let mut suspect_shards: Vec<(u32, String, i64)> = Vec::new();
    let mut judged: std::collections::BTreeSet<(u32, String)> = walk.sums.keys().cloned().collect();
    judged.extend(after.keys().cloned());
    for (shard, scene) in judged {
        let key = (shard, scene.clone());
        if before.get(&key) != after.get(&key) {
            report.shards_busy += 1;
            continue;
        }
        report.shards_judged += 1;
        let spent = after.get(&key).copied().unwrap_or(0);
        let sum = walk.sums.get(&key).copied().unwrap_or(0);
        if sum != spent {
            suspect_shards.push((shard, scene, spent - sum));
        }
    }
    if !suspect_shards.is_empty() {
        let shards: std::collections::BTreeSet<u32> = suspect_shards.iter().map(|s| s.0).collect();
        let mut again = Walk::default();
        let mut quiet = AuditReport::default();
        walk_claims(
            claims,
            tokens,
            cfg,
            Some(&shards),
            &mut again,
            &mut quiet,
            started,
            &mut |_| {},
        )
        .await?;
        let after2 = spent_all(claims, cfg).await?;
        for (shard, scene, gap) in suspect_shards {
            let key = (shard, scene.clone());
            let spent = after2.get(&key).copied().unwrap_or(0);
            let sum = again.sums.get(&key).copied().unwrap_or(0);
            if after2.get(&key) != after.get(&key) || spent - sum != gap {
                // It moved, or the difference did not stand: busy after all.
                report.shards_judged -= 1;
                report.shards_busy += 1;
                continue;
            }
            let kind = if gap < 0 {
                Kind::SpentBelowClaims
            } else {
                Kind::SpentAboveClaims
            };
            report.add(
                kind,
                format!(
                    "{scene} shard {shard}: spent {spent}, claims sum {sum} ({})",
                    claim_keys::budget_key(&cfg.claims_prefix, &scene, shard)
                ),
                keep,
            );
        }
    }
    pending_tokens(tokens, cfg, &walk, &mut report).await?;
    stale_due(tokens, cfg, &mut report).await?;
    old_doubts(claims, cfg, &mut report).await?;
    report.took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(report)
}

/// Refuses a prefix with no store, or a shard count other than the store's pin.
async fn check_pins(claims: &Client, tokens: &Client, cfg: &AuditConfig) -> Result<(), AuditError> {
    let meta = claim_keys::meta_key(&cfg.claims_prefix);
    let pinned: Option<String> = claims.hget(&meta, "shards").await?;
    match pinned.as_deref().map(str::parse::<u32>) {
        Some(Ok(n)) if n == cfg.claims_shards => {}
        Some(_) => {
            return Err(AuditError::Config(format!(
                "{meta} pins {} shards, not {}: audit the store with its own count",
                pinned.unwrap_or_default(),
                cfg.claims_shards
            )));
        }
        None => {
            return Err(AuditError::Config(format!(
                "no claim store under prefix {:?} ({meta} is missing): wrong prefix or Redis?",
                cfg.claims_prefix
            )));
        }
    }
    let pin = token_keys::due_shards_pin_key(&cfg.token_prefix);
    let due: Option<String> = tokens.get(&pin).await?;
    match due.as_deref().map(str::parse::<u32>) {
        Some(Ok(n)) if n == cfg.due_shards => Ok(()),
        Some(_) => Err(AuditError::Config(format!(
            "{pin} pins {} due shards, not {}",
            due.unwrap_or_default(),
            cfg.due_shards
        ))),
        None => Err(AuditError::Config(format!(
            "no token store under prefix {:?} ({pin} is missing): wrong prefix or Redis?",
            cfg.token_prefix
        ))),
    }
}

/// Walks the claim records (of `only` these shards, or all), page by page at the
/// read rate: judges each record and looks up the page's granted rewards' tokens.
#[allow(clippy::too_many_arguments)]
async fn walk_claims(
    claims: &Client,
    tokens: &Client,
    cfg: &AuditConfig,
    only: Option<&std::collections::BTreeSet<u32>>,
    walk: &mut Walk,
    report: &mut AuditReport,
    started: Instant,
    progress: &mut dyn FnMut(u64),
) -> Result<(), AuditError> {
    let pattern = claim_keys::record_pattern(&cfg.claims_prefix);
    for node in nodes(claims).await? {
        let mut cursor = "0".to_string();
        loop {
            let (next, keys) =
                scan_page(claims, node.as_ref(), &cursor, &pattern, cfg.page).await?;
            walk.units += u64::from(cfg.page);
            let keys: Vec<String> = keys
                .into_iter()
                .filter(|k| {
                    claim_keys::record_of(&cfg.claims_prefix, k)
                        .is_some_and(|(s, _)| only.is_none_or(|o| o.contains(&s)))
                })
                .filter(|k| walk.seen.insert(key_hash(k)))
                .collect();
            if !keys.is_empty() {
                let page = read_records(claims, &keys).await?;
                let mut granted = Vec::new();
                for (key, rec) in keys.iter().zip(page) {
                    report.claims_read += 1;
                    judge_record(cfg, key, &rec, report, &mut walk.sums, &mut granted);
                }
                walk.units += keys.len() as u64 + granted.len() as u64;
                if only.is_none() && !granted.is_empty() {
                    let pending = still_pending(tokens, cfg, granted.iter()).await?;
                    for (g, p) in granted.into_iter().zip(pending) {
                        if !p {
                            continue;
                        }
                        if walk.suspects.len() < cfg.max_suspects {
                            walk.suspects.push(g);
                        } else {
                            walk.suspects_over += 1;
                        }
                    }
                }
                progress(report.claims_read);
            }
            pace(cfg.keys_per_sec, walk.units, started).await;
            if next == "0" {
                break;
            }
            cursor = next;
        }
    }
    Ok(())
}

/// A hash of a key (the walk's duplicate filter: 8 bytes a key; two keys of a
/// million collide with odds of about 3 in 100 million, and then one is skipped).
fn key_hash(key: &str) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

/// Sleeps as long as `units` of work since `started` ran ahead of the rate.
async fn pace(per_sec: u64, units: u64, started: Instant) {
    if per_sec == 0 {
        return;
    }
    let due = Duration::from_secs_f64(units as f64 / per_sec as f64);
    if let Some(ahead) = due.checked_sub(started.elapsed()) {
        tokio::time::sleep(ahead).await;
    }
}

/// The records' fields in [`FIELDS`] order, one pipelined `GET` each (a record gone
/// meanwhile, or one that is not a record: all `None`).
async fn read_records(
    client: &Client,
    keys: &[String],
) -> Result<Vec<Vec<Option<String>>>, AuditError> {
    let pipe = client.pipeline();
    for k in keys {
        let _: () = pipe.get(k.as_str()).await?;
    }
    let answers = pipe.try_all::<Option<String>>().await;
    Ok(answers
        .into_iter()
        .map(|v| {
            match v
                .ok()
                .flatten()
                .and_then(|t| reward_service::claim::Record::parse(&t))
            {
                Some(r) => vec![
                    Some(r.scene),
                    Some(r.user_id),
                    Some(r.activity_id),
                    Some(r.amount.to_string()),
                    Some(r.state.as_str().to_string()),
                    Some(r.result),
                ],
                None => vec![None; FIELDS.len()],
            }
        })
        .collect())
}

/// Judges one record: a granted one needs a receipt; live and granted amounts count
/// toward their scene shard's sum; granted ones go on to the pending-token check.
fn judge_record(
    cfg: &AuditConfig,
    key: &str,
    rec: &[Option<String>],
    report: &mut AuditReport,
    sums: &mut HashMap<(u32, String), i64>,
    granted: &mut Vec<Reward>,
) {
    let field = |i: usize| rec.get(i).and_then(Option::as_deref).unwrap_or("");
    let (scene, user, activity, amount, state, result) =
        (field(0), field(1), field(2), field(3), field(4), field(5));
    let Some((shard, trade)) = claim_keys::record_of(&cfg.claims_prefix, key) else {
        return;
    };
    if state == "GRANTED" && result.is_empty() {
        report.add(
            Kind::GrantedWithoutReceipt,
            format!("{trade} ({key})"),
            cfg.examples,
        );
    }
    if matches!(state, "IN_PROGRESS" | "IN_DOUBT" | "GRANTED") {
        let amount = amount.parse::<i64>().unwrap_or(0);
        *sums.entry((shard, scene.to_string())).or_default() += amount;
    }
    if state == "GRANTED" && !user.is_empty() {
        granted.push((user.to_string(), activity.to_string(), trade.to_string()));
    }
}

/// Every configured scene's `spent` in every shard (shards with no budget hash left
/// out).
async fn spent_all(
    client: &Client,
    cfg: &AuditConfig,
) -> Result<HashMap<(u32, String), i64>, AuditError> {
    let mut out = HashMap::new();
    for scene in &cfg.scenes {
        let pipe = client.pipeline();
        for shard in 0..cfg.claims_shards {
            let _: () = pipe
                .hget(
                    claim_keys::budget_key(&cfg.claims_prefix, scene, shard),
                    "spent",
                )
                .await?;
        }
        let spent: Vec<Option<i64>> = pipe.all().await?;
        for (shard, s) in (0..cfg.claims_shards).zip(spent) {
            if let Some(s) = s {
                out.insert((shard, scene.clone()), s);
            }
        }
    }
    Ok(out)
}

/// Granted rewards whose token was pending at the walk's look and still is
/// `recheck` later, with no due entry left for the sweeper to repair it by.
async fn pending_tokens(
    client: &Client,
    cfg: &AuditConfig,
    walk: &Walk,
    report: &mut AuditReport,
) -> Result<(), AuditError> {
    report.suspects_unchecked = walk.suspects_over;
    if walk.suspects.is_empty() {
        return Ok(());
    }
    tokio::time::sleep(cfg.recheck).await;
    for chunk in walk.suspects.chunks(cfg.page as usize) {
        let again = still_pending(client, cfg, chunk.iter()).await?;
        let pipe = client.pipeline();
        for (user, activity, trade) in chunk {
            let _: () = pipe
                .zscore(
                    token_keys::user_due_key(&cfg.token_prefix, user, cfg.due_shards),
                    token_keys::due_member(user, activity, trade),
                )
                .await?;
        }
        let due: Vec<Option<f64>> = pipe.all().await?;
        for (((user, activity, trade), pending), due) in chunk.iter().zip(again).zip(due) {
            if pending && due.is_none() {
                report.add(
                    Kind::CreditedTokenPending,
                    format!(
                        "{trade}: still in {}",
                        token_keys::token_key(&cfg.token_prefix, user, activity)
                    ),
                    cfg.examples,
                );
            }
        }
    }
    Ok(())
}

async fn still_pending<'a>(
    client: &Client,
    cfg: &AuditConfig,
    rewards: impl Iterator<Item = &'a (String, String, String)>,
) -> Result<Vec<bool>, AuditError> {
    let pipe = client.pipeline();
    let mut n = 0;
    for (user, activity, trade) in rewards {
        let _: () = pipe
            .hget(
                token_keys::token_key(&cfg.token_prefix, user, activity),
                trade.as_str(),
            )
            .await?;
        n += 1;
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    // A field is pending unless it says credited (`sdk::store::life::Field`).
    let held: Vec<Option<String>> = pipe.all().await?;
    Ok(held
        .into_iter()
        .map(|v| v.is_some_and(|v| !sdk::store::life::Field::of(&v).credited()))
        .collect())
}

fn now_ms() -> i64 {
    reward_runtime::clock::now_ms()
}

fn cutoff(age: Duration) -> f64 {
    (now_ms() - i64::try_from(age.as_millis()).unwrap_or(i64::MAX)) as f64
}

/// Due index entries older than the sweeper's grace, each judged by its token: one
/// still pending is a stored reward nobody credited (a finding); one whose token says
/// credited, or was never stored, is owed nothing and waits for the sweeper to end it
/// (`stale_due_settled`).
/// Read page by page in score order, resuming at the last score seen, so entries the
/// sweeper ends meanwhile shift nothing.
async fn stale_due(
    client: &Client,
    cfg: &AuditConfig,
    report: &mut AuditReport,
) -> Result<(), AuditError> {
    let before = cutoff(cfg.stale_after);
    let page = i64::from(cfg.page);
    let started = Instant::now();
    let mut reads = 0u64;
    for shard in 0..cfg.due_shards {
        let key = token_keys::due_key(&cfg.token_prefix, shard);
        let mut from = f64::NEG_INFINITY;
        // Members already judged at the score `from` (a page may end inside a run of
        // equal scores).
        let mut at_from: std::collections::HashSet<String> = std::collections::HashSet::new();
        loop {
            let entries: Vec<(String, f64)> = client
                .zrangebyscore(&key, from, before, true, Some((0, page)))
                .await?;
            let full = entries.len() as i64 == page;
            let fresh: Vec<(String, f64)> = entries
                .into_iter()
                .filter(|(m, score)| *score != from || !at_from.contains(m))
                .collect();
            if fresh.is_empty() {
                if full {
                    // A whole page of one score, all judged: a bigger page is needed.
                    return Err(AuditError::Config(format!(
                        "more than {page} due entries of {key} share one score; raise the page size"
                    )));
                }
                break;
            }
            let owed = still_owed(client, cfg, &fresh).await?;
            reads += 2 * fresh.len() as u64;
            let now = now_ms() as f64;
            for ((member, since), owed) in fresh.iter().zip(owed) {
                if !owed {
                    report.stale_due_settled += 1;
                } else {
                    report.add(
                        Kind::StaleDueEntry,
                        format!("{member} in {key}, {:.0} s old", (now - since) / 1000.0),
                        cfg.examples,
                    );
                }
            }
            if let Some((_, last)) = fresh.last() {
                if *last != from {
                    at_from.clear();
                    from = *last;
                }
                at_from.extend(
                    fresh
                        .iter()
                        .filter(|(_, s)| *s == from)
                        .map(|(m, _)| m.clone()),
                );
            }
            pace(cfg.keys_per_sec, reads, started).await;
            if !full {
                break;
            }
        }
    }
    Ok(())
}

/// Whether each due entry is still owed: its token is stored and not credited, or the
/// member does not parse (the index holds something no writer wrote).
async fn still_owed(
    client: &Client,
    cfg: &AuditConfig,
    entries: &[(String, f64)],
) -> Result<Vec<bool>, AuditError> {
    let pipe = client.pipeline();
    let mut asked = Vec::with_capacity(entries.len());
    for (member, _) in entries {
        match token_keys::parse_due_member(member) {
            Some((user, activity, trade)) => {
                let _: () = pipe
                    .hget(
                        token_keys::token_key(&cfg.token_prefix, user, activity),
                        trade,
                    )
                    .await?;
                asked.push(true);
            }
            None => asked.push(false),
        }
    }
    let held: Vec<Option<String>> = if asked.iter().any(|a| *a) {
        pipe.all().await?
    } else {
        Vec::new()
    };
    let mut held = held.into_iter();
    Ok(asked
        .into_iter()
        .map(|a| {
            !a || held
                .next()
                .flatten()
                .is_some_and(|v| !sdk::store::life::Field::of(&v).credited())
        })
        .collect())
}

/// In-doubt grants older than their hold.
async fn old_doubts(
    client: &Client,
    cfg: &AuditConfig,
    report: &mut AuditReport,
) -> Result<(), AuditError> {
    let before = cutoff(cfg.doubt_hold);
    for shard in 0..cfg.claims_shards {
        let key = claim_keys::doubt_key(&cfg.claims_prefix, shard);
        old_members(
            client,
            &key,
            before,
            Kind::InDoubtPastHold,
            cfg.examples,
            report,
        )
        .await?;
    }
    Ok(())
}

/// Members of the sorted set `key` scored (ms) before `before`: counted, the oldest
/// kept as examples with their age.
async fn old_members(
    client: &Client,
    key: &str,
    before: f64,
    kind: Kind,
    keep: usize,
    report: &mut AuditReport,
) -> Result<(), AuditError> {
    let n: u64 = client.zcount(key, f64::NEG_INFINITY, before).await?;
    if n == 0 {
        return Ok(());
    }
    let room = keep.saturating_sub(report.findings.get(&kind).map_or(0, |f| f.examples.len()));
    let oldest: Vec<(String, f64)> = if room > 0 {
        client
            .zrangebyscore(
                key,
                f64::NEG_INFINITY,
                before,
                true,
                Some((0, i64::try_from(room).unwrap_or(1))),
            )
            .await?
    } else {
        Vec::new()
    };
    let f = report.findings.entry(kind).or_default();
    f.count += n;
    let now = now_ms() as f64;
    for (member, since) in oldest {
        f.examples.push(format!(
            "{member} in {key}, {:.0} s old",
            (now - since) / 1000.0
        ));
    }
    Ok(())
}

/// Publishes a report as the `reward_audit_*` metrics (the watch mode of
/// `reward-ctl audit --every`).
pub fn export(report: &AuditReport) {
    for k in Kind::ALL {
        let n = report.findings.get(&k).map_or(0, |f| f.count);
        metrics::gauge!("reward_audit_findings", "kind" => k.as_str()).set(n as f64);
    }
    metrics::counter!("reward_audit_runs_total").increment(1);
    metrics::counter!("reward_audit_claims_read_total").increment(report.claims_read);
    metrics::gauge!("reward_audit_busy_shards").set(report.shards_busy as f64);
    metrics::gauge!("reward_audit_last_run_timestamp_seconds")
        .set(reward_runtime::clock::now_ms() as f64 / 1000.0);
    metrics::histogram!("reward_audit_run_seconds").record(report.took_ms as f64 / 1000.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kinds_are_the_catalogues() {
        let names: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names, reward_runtime::catalogue::AUDIT_KINDS);
    }

    #[test]
    fn a_claim_key_names_its_shard_and_nothing_else_does() {
        let shard_of_key =
            |prefix: &str, key: &str| claim_keys::record_of(prefix, key).map(|(shard, _)| shard);
        assert_eq!(shard_of_key("rc", "rc:{rc.7}:t:T1"), Some(7));
        assert_eq!(shard_of_key("rc", "rc:{rc.07}:t:T1"), None);
        assert_eq!(shard_of_key("rc", "other:{rc.7}:t:T1"), None);
        assert_eq!(shard_of_key("rc", "rc:{rc.x}:t:T1"), None);
    }

    #[test]
    fn records_are_judged_by_state_receipt_and_amount() {
        let cfg = AuditConfig::new("rc", 4, "tok", 2);
        let mut report = AuditReport::default();
        let (mut sums, mut granted) = (HashMap::new(), Vec::new());
        let rec = |state: &str, amount: &str, result: &str| -> Vec<Option<String>> {
            ["a/s", "u1", "a", amount, state, result]
                .iter()
                .map(|s| (!s.is_empty()).then(|| s.to_string()))
                .collect()
        };
        judge_record(
            &cfg,
            "rc:{rc.1}:t:T1:t:x",
            &rec("GRANTED", "5", "tx1"),
            &mut report,
            &mut sums,
            &mut granted,
        );
        judge_record(
            &cfg,
            "rc:{rc.1}:t:T2",
            &rec("GRANTED", "7", ""),
            &mut report,
            &mut sums,
            &mut granted,
        );
        judge_record(
            &cfg,
            "rc:{rc.1}:t:T3",
            &rec("FAILED", "100", "why"),
            &mut report,
            &mut sums,
            &mut granted,
        );
        judge_record(
            &cfg,
            "rc:{rc.1}:t:T4",
            &rec("IN_DOUBT", "11", ""),
            &mut report,
            &mut sums,
            &mut granted,
        );
        assert_eq!(report.findings[&Kind::GrantedWithoutReceipt].count, 1);
        assert_eq!(
            sums[&(1, "a/s".to_string())],
            5 + 7 + 11,
            "failed claims are refunded"
        );
        assert_eq!(granted.len(), 2);
        assert_eq!(granted[0].2, "T1:t:x", "a trade number may hold :t:");
    }
}
