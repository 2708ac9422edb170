//! A reward service in this process, configured from `ops/reward-service.toml` with
//! fresh keys, free ports and key prefixes of the run's own.

use reward_service::config::ServiceConfig;
use reward_stack::env::StackEnv;

fn hex_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// A reward service in this process (config `ops/reward-service.toml`, key prefixes
/// named by `tag`: claims `gb-<tag>`, ledger `gbl-<tag>`, tokens `gbt-<tag>`; files in
/// `dir`, the built-in ledger on `ledger_redis_url`); returns it and its bearer
/// credential.
pub async fn start_service(
    env: &StackEnv,
    tag: &str,
    dir: &std::path::Path,
    replica_acks: u32,
    ledger_redis_url: &str,
) -> anyhow::Result<(reward_service::server::Running, String)> {
    std::fs::create_dir_all(dir)?;
    let keys = dir.join("keys");
    std::fs::write(&keys, sdk::token::KeyRing::random(1).to_text().as_bytes())?;
    let credential = format!("{}{}", hex_id(), hex_id());
    let vars = [
        ("REWARD_SERVICE_TOKEN", credential.clone()),
        ("REWARD_WALLET_TOKEN", format!("{}{}", hex_id(), hex_id())),
        // Within the bench records' retention below.
        ("REWARD_SDK__TOKEN__TTL_SECS", "3600".into()),
        ("REWARD_SERVICE__SERVER__GRPC_ADDR", "127.0.0.1:0".into()),
        ("REWARD_SERVICE__SERVER__HTTP_ADDR", "127.0.0.1:0".into()),
        ("REWARD_SERVICE__CLAIMS__KEY_PREFIX", format!("gb-{tag}")),
        ("REWARD_SERVICE__LEDGER__KEY_PREFIX", format!("gbl-{tag}")),
        (
            "REWARD_SERVICE__LEDGER__REDIS_URL",
            ledger_redis_url.to_string(),
        ),
        // Bench records need not outlive the bench by 30 days.
        ("REWARD_SERVICE__CLAIMS__RETENTION_SECS", "3600".into()),
        (
            "REWARD_SERVICE__FAILURES__ARCHIVE",
            dir.join("failures.jsonl").display().to_string(),
        ),
        ("REWARD_SDK__STORE__REDIS_URL", env.redis_url.clone()),
        (
            "REWARD_SERVICE__CLAIMS__REPLICA_ACKS",
            replica_acks.to_string(),
        ),
        ("REWARD_SDK__STORE__KEY_PREFIX", format!("gbt-{tag}")),
        ("REWARD_SDK__TOKEN__KEYS_FILE", keys.display().to_string()),
        (
            "REWARD_SDK__PRODUCERS__KAFKA__BROKERS",
            env.kafka_brokers.clone(),
        ),
        (
            "REWARD_SDK__PRODUCERS__ROCKETMQ__NAMESRV",
            env.rocketmq_namesrv.clone(),
        ),
        (
            "REWARD_SDK__SPOOL__DIR",
            dir.join("spool").display().to_string(),
        ),
    ];
    let vars: Vec<(String, String)> = vars.into_iter().map(|(k, v)| (k.into(), v)).collect();
    let text = include_str!("../../../ops/reward-service.toml");
    let cfg = ServiceConfig::from_toml_str(text, &vars)?;
    let running = reward_service::server::start(&cfg).await?;
    Ok((running, credential))
}
