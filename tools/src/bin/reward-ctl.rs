//! `reward-ctl`: change the pipeline's live settings, validated and audited.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use reward_tools::control::{Control, ControlError, Known, schema};

/// Changes the settings operators turn during an event, on every running instance at
/// once (they poll the shared document every 500 ms), after checking the change the
/// way the instances will. A refused change writes nothing (exit 2). Every change is
/// recorded (who, when, old, new) in Redis (`reward-ctl changes`) and in --audit-log.
///
/// Knobs: listed below (`reward-ctl set KEY VALUE`).
/// Budgets (`reward-ctl budget SCENE TOTAL`): a configured "activity/scene" budget in
/// the smallest unit; never below what the scene has spent. The scene's shards are held
/// for the change (new grants wait up to 5 s), so it never spends past the new total.
/// In-doubt grants (`reward-ctl in-doubt`, `reward-ctl settle`): credits whose outcome
/// the downstream could not tell (no idempotency key, no status query); check each in
/// the downstream, then record it credited or let the next delivery credit it.
/// Lost shard pins (`reward-ctl layout claims|due --prefix P --shards N`): what a
/// service or SDK that refused to start names; needs no config.
/// The books (`reward-ctl books --sent FILE ...`): every reward sent credited once,
/// within budget, its token stored; a PASS/FAIL table, exit 1 on FAIL; needs no config.
/// The live audit (`reward-ctl audit`): the books of a running system from Redis
/// alone, at a bounded read rate; once, or every N s exporting its findings as
/// metrics (`--every N --metrics-addr A`).
///
/// Reward types, queues, producers and scenes must exist in the configs the instances
/// run with (--consumer-config, --service-config).
#[derive(Debug, Parser)]
#[command(version, verbatim_doc_comment, after_help = schema::help())]
struct Args {
    /// The stack's Redis (where the shared document, budgets and audit list live).
    #[arg(long, env = "REDIS_URL", default_value_t = reward_stack::env::default_redis_url())]
    redis: String,
    /// The shared document's Redis hash (the instances' [dynamic] redis_key).
    #[arg(long, env = "REWARD_CONFIG_KEY", default_value = "reward:config")]
    key: String,
    /// The consumer config the consumers run with (limits, types).
    #[arg(long, default_value = "ops/consumer.toml")]
    consumer_config: PathBuf,
    /// The reward service config (its [sdk] queues and producers, budgets, claims).
    #[arg(long, default_value = "ops/reward-service.toml")]
    service_config: PathBuf,
    /// Local copy of the audit trail (JSON lines).
    #[arg(long, default_value = "/var/tmp/reward-ctl/audit.jsonl")]
    audit_log: PathBuf,
    /// Who is changing things [default: $REWARD_CTL_USER, $SUDO_USER or $USER].
    #[arg(long)]
    who: Option<String>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Every override in force.
    Show,
    /// One override (empty if the instances use their file's value).
    Get {
        /// A knob (see --help).
        key: String,
    },
    /// Check and set a knob on every instance.
    Set {
        /// A knob (see --help).
        key: String,
        /// Its value (a number, true/false, or a name).
        #[arg(allow_hyphen_values = true)]
        value: String,
    },
    /// Remove an override: back to the instances' config files.
    Unset {
        /// A knob.
        key: String,
    },
    /// Show or set a scene's total budget. With --service (or REWARD_SERVICE_GRPC), over
    /// the service's admin API (REWARD_ADMIN_TOKEN or REWARD_ADMIN_TOKEN_FILE holds the
    /// admin credential): any scene, no config file or Redis access needed; the service
    /// records the change on its trail ([admin] trail_key, in its claim store's Redis:
    /// `reward-ctl changes` shows it when --redis and --key name the same), not in
    /// --audit-log. Without it, straight in Redis, for the scenes the --service-config
    /// names.
    Budget {
        /// "activity/scene".
        scene: String,
        /// The new total, smallest unit (omitted: show the budget).
        #[arg(allow_hyphen_values = true)]
        total: Option<i64>,
        /// The reward service's gRPC address (http://host:port), for the admin API.
        #[arg(long, env = "REWARD_SERVICE_GRPC")]
        service: Option<String>,
        /// Why, for the change trail (admin API only).
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Grants held in doubt, oldest first: trade number, since, scene, user, type, amount.
    InDoubt,
    /// Settle an in-doubt grant after checking its downstream.
    Settle {
        /// Its trade number.
        trade_no: String,
        /// The downstream credited it, with this receipt (transaction id, not empty).
        #[arg(
            long,
            conflicts_with = "not_credited",
            required_unless_present = "not_credited",
            value_parser = non_empty
        )]
        credited: Option<String>,
        /// The downstream never credited it: the next delivery credits it.
        #[arg(long)]
        not_credited: bool,
    },
    /// The last changes, newest first (who, when, old, new).
    Changes {
        /// How many.
        #[arg(long, default_value_t = 20)]
        last: i64,
    },
    /// Audit the books of a running system from its Redis alone.
    ///
    /// Checks every claim record (a GRANTED one needs a receipt), each configured
    /// scene's spent against its claims per shard, that no credited reward's token is
    /// still pending, that no due index entry is older than the sweeper's grace and no
    /// grant in doubt older than --doubt-hold-secs (reward_tools::audit). Reads at most
    /// --keys-per-sec reads a second (each key a SCAN page looks at, claim or not, each
    /// record read and each token check), on a single Redis or a cluster. The
    /// stores come from --service-config unless named here. Exit 0 clean, 1 findings,
    /// 2 bad input, 3 Redis failed. With --every N: runs every N s until SIGTERM,
    /// printing a line per run and exporting reward_audit_* on --metrics-addr.
    Audit {
        /// The claim store's key prefix [default: the service config's].
        #[arg(long)]
        claims_prefix: Option<String>,
        /// The claim store's shards [default: the service config's].
        #[arg(long)]
        claims_shards: Option<u32>,
        /// The token store's key prefix [default: the service config's [sdk.store]].
        #[arg(long)]
        token_prefix: Option<String>,
        /// The due index's shards [default: the service config's [sdk.store]].
        #[arg(long)]
        due_shards: Option<u32>,
        /// A scene with a budget, activity/scene (repeatable) [default: the service
        /// config's [budgets]].
        #[arg(long = "scene")]
        scenes: Vec<String>,
        /// A due entry older than this is stale [default: the service config's
        /// [sweeper] grace_ms + retry_ms + 2 x interval_ms: what the sweeper keeps on
        /// purpose is not counted].
        #[arg(long)]
        stale_after_ms: Option<u64>,
        /// The token store's Redis, when not --redis (the service config's
        /// [sdk.store] redis_url, if it names another).
        #[arg(long)]
        token_redis: Option<String>,
        /// An in-doubt grant older than this is a finding.
        #[arg(long, default_value_t = 600)]
        doubt_hold_secs: u64,
        /// Redis reads per second at most: each key a SCAN page looks at (claim or
        /// not: a walk costs Redis by the keyspace's size), each record read and each
        /// token check counts one; a granted claim costs about 3.
        #[arg(long, default_value_t = 50_000)]
        keys_per_sec: u64,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Run every this many seconds until SIGTERM (watch mode).
        #[arg(long)]
        every: Option<u64>,
        /// Serve the findings as Prometheus metrics here (watch mode).
        #[arg(long, requires = "every")]
        metrics_addr: Option<std::net::SocketAddr>,
    },
    /// Restore a lost shard pin after checking every key of the store against it.
    ///
    /// A claim store (`claims`) or a due index (`due`) whose pin key was lost refuses
    /// to start when a bounded look at its data cannot prove the configured count.
    /// This walks the whole store (progress on stderr) and writes the pin only if no
    /// key contradicts --shards; an existing pin is only compared. Needs no config.
    Layout {
        /// Which store: `claims` (the reward service's `[claims]`) or `due` (the
        /// token store's due index, `[sdk.store]`).
        #[arg(value_parser = ["claims", "due"])]
        store: String,
        /// The store's key prefix (`claims.key_prefix` or `sdk.store.key_prefix`).
        #[arg(long)]
        prefix: String,
        /// The shard count the instances are configured with (`claims.shards` or
        /// `sdk.store.due_shards`).
        #[arg(long)]
        shards: u32,
    },
    /// Check the books of what was sent against Redis: a PASS/FAIL table.
    ///
    /// Reads the ledger (the built-in downstream), the claim store's budgets and the
    /// token hashes directly, never a service's counters (the checks:
    /// `reward_tools::books`). Exit 0 when every check passes, 1 when one fails, 2 on
    /// bad input (a malformed sent list names its line). Needs no config.
    Books {
        /// The sent list: one line per reward the SDK accepted, tab-separated: trade
        /// number, user, activity, scene, type, amount, send time (Unix ms), token
        /// stored (0/1), repeat (0/1). A replay's `sent.tsv` is one.
        #[arg(long)]
        sent: PathBuf,
        /// The token store's key prefix (`[sdk.store] key_prefix`).
        #[arg(long)]
        token_prefix: String,
        /// The claim store's key prefix (`[claims] key_prefix`).
        #[arg(long)]
        claims_prefix: String,
        /// The claim store's shards per scene (`[claims] shards`).
        #[arg(long)]
        claims_shards: u32,
        /// The ledger's key prefix.
        #[arg(long)]
        ledger_prefix: String,
        /// The ledger's Redis, when it is not the pipeline's (`[ledger] redis_url`;
        /// a replay's stand-in wallet keeps it on the stack's WALLET_REDIS_URL).
        #[arg(long)]
        ledger_redis: Option<String>,
        /// A scene's budget, `activity/scene=TOTAL` (repeatable): spent must equal the
        /// scene's credits and stay within it.
        #[arg(long = "budget", value_parser = budget_arg)]
        budgets: Vec<(String, i64)>,
        /// Token writes the SDK counted as failed: so many sent rewards may lack a
        /// stored token.
        #[arg(long, default_value_t = 0)]
        token_write_failures: u64,
    },
}

/// A value that is not empty or blank (a receipt).
fn non_empty(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("must not be empty: a credit's receipt names the downstream's transaction".into())
    } else {
        Ok(s.to_string())
    }
}

/// `activity/scene=TOTAL`.
fn budget_arg(s: &str) -> Result<(String, i64), String> {
    let (scope, total) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("{s:?}: expected activity/scene=TOTAL"))?;
    if !scope.contains('/') {
        return Err(format!("{scope:?}: expected activity/scene"));
    }
    let total: i64 = total
        .parse()
        .map_err(|e| format!("{total:?}: not a whole number ({e})"))?;
    if total < 0 {
        return Err(format!("{total}: a budget is not negative"));
    }
    Ok((scope.to_string(), total))
}

fn who(given: Option<String>) -> String {
    given
        .or_else(|| std::env::var("REWARD_CTL_USER").ok())
        .or_else(|| std::env::var("SUDO_USER").ok())
        .or_else(|| std::env::var("USER").ok())
        .filter(|w| !w.trim().is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Cmd::Layout {
        store,
        prefix,
        shards,
    } = &args.command
    {
        return layout(&args.redis, store, prefix, *shards).await;
    }
    if let Cmd::Books {
        sent,
        token_prefix,
        claims_prefix,
        claims_shards,
        ledger_prefix,
        ledger_redis,
        budgets,
        token_write_failures,
    } = &args.command
    {
        let at = reward_tools::books::Stores {
            redis_url: args.redis.clone(),
            ledger_redis_url: ledger_redis.clone().unwrap_or_else(|| args.redis.clone()),
            token_prefix: token_prefix.clone(),
            claims_prefix: claims_prefix.clone(),
            claims_shards: *claims_shards,
            ledger_prefix: ledger_prefix.clone(),
        };
        return books(at, sent, budgets, *token_write_failures).await;
    }
    if let Cmd::Audit { .. } = &args.command {
        return audit(&args).await;
    }
    if let Cmd::Budget {
        scene,
        total,
        service: Some(service),
        reason,
    } = &args.command
    {
        return budget_api(service, scene, *total, reason, &args.who).await;
    }
    let known = match Known::load(&args.consumer_config, &args.service_config) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("reward-ctl: {e:#}");
            return ExitCode::from(2);
        }
    };
    let ctl = match Control::connect(
        &args.redis,
        &args.key,
        known,
        Some(args.audit_log.clone()),
        who(args.who.clone()),
    )
    .await
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("reward-ctl: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(&ctl, &args.command).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ ControlError::Refused(_)) => {
            eprintln!("reward-ctl: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("reward-ctl: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `reward-ctl budget --service`: the service's admin API (`reward_tools::budget_api`).
async fn budget_api(
    service: &str,
    scene: &str,
    total: Option<i64>,
    reason: &str,
    who_arg: &Option<String>,
) -> ExitCode {
    use reward_tools::budget_api::{BudgetApiError, Client};
    let reason = match (reason, who_arg) {
        ("", Some(w)) => w.clone(),
        ("", None) => who(None),
        (r, _) => format!("{}: {r}", who(who_arg.clone())),
    };
    let run = async {
        let mut client = Client::connect(service).await?;
        match total {
            None => {
                let b = client.get(scene).await?;
                println!("{}", reward_tools::budget_api::shown(&b));
            }
            Some(t) => {
                let (before, after) = client.set(scene, t, &reason).await?;
                println!(
                    "budget {scene}: {} -> {} (spent {})",
                    before.total, after.total, after.spent
                );
            }
        }
        Ok::<(), BudgetApiError>(())
    };
    match run.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reward-ctl: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `reward-ctl layout`: walks the store, restores the pin when the data agrees.
async fn layout(redis: &str, store: &str, prefix: &str, shards: u32) -> ExitCode {
    use reward_runtime::keyspace::LayoutProof;
    let client = match reward_runtime::redis::builder(redis, std::time::Duration::from_secs(10))
        .and_then(|b| b.build())
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("reward-ctl: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = fred::interfaces::ClientLike::init(&client).await {
        eprintln!("reward-ctl: cannot reach Redis: {e}");
        return ExitCode::FAILURE;
    }
    let progress = |pages: u64| eprintln!("reward-ctl: {pages} SCAN pages walked");
    let proof = match store {
        "claims" => reward_service::claim::layout::restore_pin(&client, prefix, shards, progress)
            .await
            .map_err(|e| e.to_string()),
        _ => sdk::store::layout::restore_pin(&client, prefix, shards, progress)
            .await
            .map_err(|e| e.to_string()),
    };
    match proof {
        Ok(LayoutProof::Empty) => {
            println!("{store} under {prefix:?}: no key yet; pinned {shards} shards");
            ExitCode::SUCCESS
        }
        Ok(LayoutProof::Agrees {
            samples: 0,
            complete: false,
        }) => {
            println!(
                "{store} under {prefix:?}: already pinned at {shards} shards; nothing changed"
            );
            ExitCode::SUCCESS
        }
        Ok(LayoutProof::Agrees { samples, .. }) => {
            println!(
                "{store} under {prefix:?}: every key agrees with {shards} shards ({samples} placed keys checked); pin restored"
            );
            ExitCode::SUCCESS
        }
        Ok(LayoutProof::Differs { key, why }) => {
            eprintln!(
                "reward-ctl: {store} under {prefix:?} is not a store of {shards} shards: {key}: {why}. Nothing written; configure the store's own count"
            );
            ExitCode::from(2)
        }
        Ok(LayoutProof::Unproven { keys, samples }) => {
            eprintln!(
                "reward-ctl: {store} under {prefix:?}: the walk ended undecided ({keys} keys, {samples} placed); nothing written"
            );
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("reward-ctl: {e}");
            ExitCode::from(2)
        }
    }
}

/// `reward-ctl books`: the table, exit 1 on FAIL.
async fn books(
    at: reward_tools::books::Stores,
    sent: &std::path::Path,
    budgets: &[(String, i64)],
    token_write_failures: u64,
) -> ExitCode {
    let (sent, repeats, conflicts) = match reward_tools::books::read_sent(sent) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("reward-ctl: {e:#}");
            return ExitCode::from(2);
        }
    };
    let expected = reward_tools::books::Expected {
        sent,
        repeats,
        conflicts,
        budgets: budgets.iter().cloned().collect(),
        token_write_failures,
        excused: None,
    };
    match reward_tools::books::check(&at, &expected).await {
        Ok(r) => {
            print!("{}", r.table());
            if r.passed() {
                println!("books: PASS");
                ExitCode::SUCCESS
            } else {
                println!("books: FAIL");
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("reward-ctl: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn shown(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "(file value)".into())
}

async fn run(ctl: &Control, command: &Cmd) -> Result<(), ControlError> {
    match command {
        Cmd::Show => {
            let o = ctl.overrides().await?;
            if o.is_empty() {
                println!("(no overrides)");
            }
            for (k, v) in o {
                println!("{k} = {v}");
            }
        }
        Cmd::Get { key } => {
            if let Some(v) = ctl.overrides().await?.get(key) {
                println!("{v}");
            }
        }
        Cmd::Set { key, value } => {
            let old = ctl.set(key, value).await?;
            println!("{key}: {} -> {value}", shown(&old));
        }
        Cmd::Unset { key } => match ctl.unset(key).await? {
            Some(old) => println!("{key}: {old} -> (file value)"),
            None => println!("{key} was not set"),
        },
        Cmd::Budget { scene, total, .. } => {
            let Some(total) = total else {
                return Err(ControlError::Refused(
                    "showing a budget needs --service (the admin API)".into(),
                ));
            };
            let (old, spent) = ctl.budget(scene, *total).await?;
            println!("budget {scene}: {old} -> {total} (spent {spent})");
        }
        Cmd::InDoubt => in_doubt(ctl).await?,
        Cmd::Settle {
            trade_no,
            credited,
            not_credited: _,
        } => settle(ctl, trade_no, credited.as_deref()).await?,
        // Handled before the configs are read (they need none).
        Cmd::Layout { .. } | Cmd::Books { .. } | Cmd::Audit { .. } => {}
        Cmd::Changes { last } => {
            for e in ctl.audit_log(*last).await? {
                println!(
                    "{} {} {}: {} -> {}",
                    e.at_unix_ms,
                    e.who,
                    e.key,
                    shown(&e.old),
                    e.new.clone().unwrap_or_else(|| "(unset)".into())
                );
            }
        }
    }
    Ok(())
}

async fn in_doubt(ctl: &Control) -> Result<(), ControlError> {
    let list = ctl.in_doubt().await?;
    if list.is_empty() {
        println!("(no grant in doubt)");
    }
    for d in list {
        match d.record {
            Some(r) => println!(
                "{} since {} scene {} user {} {} {}",
                d.trade_no, d.since_ms, r.scene, r.user_id, r.reward_type, r.amount
            ),
            None => println!("{} since {} (record gone)", d.trade_no, d.since_ms),
        }
    }
    Ok(())
}

async fn settle(ctl: &Control, trade_no: &str, credited: Option<&str>) -> Result<(), ControlError> {
    ctl.settle(trade_no, credited).await?;
    match credited {
        Some(r) => println!("{trade_no}: recorded as credited ({r})"),
        None => println!(
            "{trade_no}: released; it is credited by the next delivery of its event or a withdrawal of its token"
        ),
    }
    Ok(())
}

/// The audit's settings: the flags, else the configs the instances run with.
fn audit_config(args: &Args) -> Result<reward_tools::audit::AuditConfig, String> {
    let Cmd::Audit {
        claims_prefix,
        claims_shards,
        token_prefix,
        due_shards,
        scenes,
        stale_after_ms,
        doubt_hold_secs,
        keys_per_sec,
        ..
    } = &args.command
    else {
        return Err("not an audit".into());
    };
    let all_given = claims_prefix.is_some()
        && claims_shards.is_some()
        && token_prefix.is_some()
        && due_shards.is_some()
        && stale_after_ms.is_some();
    let known = if all_given {
        None
    } else {
        Some(
            Known::load(&args.consumer_config, &args.service_config)
                .map_err(|e| format!("{e:#} (or name the stores: --claims-prefix --claims-shards --token-prefix --due-shards --stale-after-ms)"))?,
        )
    };
    let stale_after = match stale_after_ms {
        Some(g) => *g,
        None => sweeper_stale_after(&args.service_config)?,
    };
    let pick = |given: &Option<String>, from: &dyn Fn(&Known) -> String| {
        given
            .clone()
            .or_else(|| known.as_ref().map(from))
            .unwrap_or_default()
    };
    let mut cfg = reward_tools::audit::AuditConfig::new(
        &pick(claims_prefix, &|k| k.claims.key_prefix.clone()),
        claims_shards
            .or_else(|| known.as_ref().map(|k| k.claims.shards))
            .unwrap_or(0),
        &pick(token_prefix, &|k| k.sdk.store.key_prefix.clone()),
        due_shards
            .or_else(|| known.as_ref().map(|k| k.sdk.store.due_shards))
            .unwrap_or(0),
    );
    cfg.scenes = if scenes.is_empty() {
        known
            .as_ref()
            .map(|k| k.scenes.iter().cloned().collect())
            .unwrap_or_default()
    } else {
        scenes.clone()
    };
    cfg.stale_after = std::time::Duration::from_millis(stale_after);
    cfg.doubt_hold = std::time::Duration::from_secs(*doubt_hold_secs);
    cfg.keys_per_sec = *keys_per_sec;
    if cfg.claims_prefix.is_empty() || cfg.token_prefix.is_empty() {
        return Err("the claim and token store prefixes must not be empty".into());
    }
    Ok(cfg)
}

/// When a due entry is stale, from the service config's `[sweeper]` (else the
/// sweeper's defaults): its grace, its retry wait and two of its passes, past which
/// even an entry the sweeper keeps on purpose would have been looked at again.
fn sweeper_stale_after(path: &std::path::Path) -> Result<u64, String> {
    let d = reward_service::sweeper::SweepConfig::default();
    let table: Option<toml::Table> = match std::fs::read_to_string(path) {
        Ok(text) => Some(
            text.parse()
                .map_err(|e| format!("{}: {e}", path.display()))?,
        ),
        Err(_) => None,
    };
    let setting = |key: &str, default: u64| -> Result<u64, String> {
        match table
            .as_ref()
            .and_then(|t| t.get("sweeper"))
            .and_then(|s| s.get(key))
        {
            None => Ok(default),
            Some(v) => v
                .as_integer()
                .and_then(|g| u64::try_from(g).ok())
                .ok_or_else(|| {
                    format!(
                        "{}: sweeper.{key} {v} is not a number of ms",
                        path.display()
                    )
                }),
        }
    };
    let grace = setting("grace_ms", d.grace_ms)?;
    let retry = setting("retry_ms", d.retry_ms)?;
    let interval = setting("interval_ms", d.interval_ms)?;
    Ok(grace
        .saturating_add(retry)
        .saturating_add(interval.saturating_mul(2)))
}

/// `reward-ctl audit`: once (exit 0 clean, 1 findings, 3 Redis failed), or every N s.
async fn audit(args: &Args) -> ExitCode {
    let cfg = match audit_config(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("reward-ctl audit: {e}");
            return ExitCode::from(2);
        }
    };
    let Cmd::Audit {
        json,
        every,
        metrics_addr,
        ..
    } = &args.command
    else {
        return ExitCode::from(2);
    };
    let Cmd::Audit { token_redis, .. } = &args.command else {
        return ExitCode::from(2);
    };
    let connect = |url: &str| {
        reward_runtime::redis::builder(url, std::time::Duration::from_secs(10))
            .and_then(|b| b.build())
    };
    let (client, tokens) = match (
        connect(&args.redis),
        connect(token_redis.as_deref().unwrap_or(&args.redis)),
    ) {
        (Ok(c), Ok(t)) => (c, t),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("reward-ctl audit: {e}");
            return ExitCode::from(2);
        }
    };
    let ready = async {
        fred::prelude::ClientLike::init(&client).await?;
        fred::prelude::ClientLike::init(&tokens).await
    };
    if let Err(e) = ready.await {
        // Once: a failure to answer. Watch mode: the next run tries again (fred
        // reconnects), so a Redis down at start does not end the watch.
        eprintln!("reward-ctl audit: redis: {e}");
        if every.is_none() {
            return ExitCode::from(3);
        }
    }
    let Some(every) = every else {
        let mut shown = 0u64;
        let report = reward_tools::audit::audit(&client, &tokens, &cfg, |n| {
            if n >= shown + 100_000 {
                shown = n;
                eprintln!("reward-ctl audit: {n} claim records read");
            }
        })
        .await;
        return match report {
            Ok(r) => {
                if *json {
                    println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
                } else {
                    print!("{}", r.table());
                }
                if r.clean() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e @ reward_tools::audit::AuditError::Config(_)) => {
                eprintln!("reward-ctl audit: {e}");
                ExitCode::from(2)
            }
            Err(e) => {
                eprintln!("reward-ctl audit: {e}");
                ExitCode::from(3)
            }
        };
    };
    watch(&client, &tokens, &cfg, *every, *metrics_addr).await
}

/// The watch mode: an audit every `every` seconds, its findings on /metrics.
async fn watch(
    client: &fred::prelude::Client,
    tokens: &fred::prelude::Client,
    cfg: &reward_tools::audit::AuditConfig,
    every: u64,
    addr: Option<std::net::SocketAddr>,
) -> ExitCode {
    if let Some(addr) = addr {
        let handle = match reward_runtime::admin::install_metrics() {
            Ok(h) => h,
            Err(e) => {
                eprintln!("reward-ctl audit: {e}");
                return ExitCode::from(2);
            }
        };
        reward_runtime::catalogue::register(reward_runtime::catalogue::Component::Audit);
        let ready: reward_runtime::admin::ReadyCheck =
            std::sync::Arc::new(|| Box::pin(async { Ok(()) }));
        match reward_runtime::admin::serve(addr, handle, ready).await {
            Ok((bound, _)) => println!("reward-ctl audit: metrics on http://{bound}/metrics"),
            Err(e) => {
                eprintln!("reward-ctl audit: cannot serve metrics on {addr}: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(every.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop = reward_runtime::service::stop_signal();
    tokio::pin!(stop);
    loop {
        // The stop signal first, before a tick and during a run: SIGTERM never waits
        // for a run of a large store, nor starts another.
        tokio::select! {
            biased;
            () = &mut stop => return ExitCode::SUCCESS,
            _ = tick.tick() => {}
        }
        let run = tokio::select! {
            biased;
            () = &mut stop => return ExitCode::SUCCESS,
            r = reward_tools::audit::audit(client, tokens, cfg, |_| {}) => r,
        };
        match run {
            Ok(r) => {
                reward_tools::audit::export(&r);
                let found: Vec<String> = r
                    .findings
                    .iter()
                    .filter(|(_, f)| f.count > 0)
                    .map(|(k, f)| format!("{}={}", k.as_str(), f.count))
                    .collect();
                println!(
                    "reward-ctl audit: {} claim records in {} ms; {}",
                    r.claims_read,
                    r.took_ms,
                    if found.is_empty() {
                        "clean".to_string()
                    } else {
                        found.join(" ")
                    }
                );
            }
            Err(e) => {
                metrics::counter!("reward_audit_failures_total").increment(1);
                eprintln!("reward-ctl audit: this run failed: {e}");
            }
        }
    }
}
