//! A consumer in this process, configured from `ops/consumer.toml` with group, key
//! prefixes and dynamic document of the run's own, crediting through a reward service.

use reward_stack::env::StackEnv;

/// A consumer in this process reading `topic` (config `ops/consumer.toml`, group and
/// key prefixes named by `tag`, the dynamic document in Redis hash `cbcfg-<tag>`,
/// polled every 500 ms), crediting through the reward service at `grpc_addr`;
/// `settings` are librdkafka settings for its source, `extra` more
/// `REWARD_CONSUMER__…` overrides. The token keys are those [`super::start_service`]
/// wrote in `dir`.
#[allow(clippy::too_many_arguments)]
pub async fn start_consumer(
    env: &StackEnv,
    tag: &str,
    dir: &std::path::Path,
    topic: &str,
    grpc_addr: &str,
    credential: String,
    settings: &[(String, String)],
    extra: &[(String, String)],
) -> anyhow::Result<reward_consumer::Running> {
    let vars = [
        ("REWARD_SERVICE_TOKEN", credential),
        (
            "REWARD_CONSUMER__SOURCE__BROKERS",
            env.kafka_brokers.clone(),
        ),
        ("REWARD_CONSUMER__SOURCE__GROUP", format!("cb-{tag}")),
        (
            "REWARD_CONSUMER__SERVICE__GRPC",
            format!("http://{grpc_addr}"),
        ),
        ("REWARD_CONSUMER__DELAY__KEY_PREFIX", format!("cbd-{tag}")),
        ("REWARD_CONSUMER__DYNAMIC__POLL_MS", "500".into()),
        // Requeued (parked, then moved) events go back to the topic read here.
        ("REWARD_SDK__QUEUES__MASSIVE__TOPIC", topic.to_string()),
        ("REWARD_SDK__STORE__REDIS_URL", env.redis_url.clone()),
        (
            "REWARD_SDK__TOKEN__KEYS_FILE",
            dir.join("keys").display().to_string(),
        ),
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
            dir.join("consumer-spool").display().to_string(),
        ),
    ];
    let mut vars: Vec<(String, String)> = vars.into_iter().map(|(k, v)| (k.into(), v)).collect();
    vars.extend(extra.iter().cloned());
    // The topic list is an array; set it in the text rather than through a variable.
    let text = include_str!("../../../ops/consumer.toml")
        .replace(
            "topics = [\"reward-massive\"]",
            &format!("topics = [\"{topic}\"]"),
        )
        .replace(
            "redis_key = \"reward:config\"",
            &format!("redis_key = \"cbcfg-{tag}\""),
        )
        .replace(
            "settings = { \"session.timeout.ms\" = \"30000\" }",
            &format!(
                "settings = {{ \"session.timeout.ms\" = \"30000\"{} }}",
                settings
                    .iter()
                    .map(|(k, v)| format!(", {k:?} = {v:?}"))
                    .collect::<String>()
            ),
        );
    let cfg = reward_consumer::config::ConsumerConfig::from_toml_str(&text, &vars)?;
    Ok(reward_consumer::start(&cfg).await?)
}
