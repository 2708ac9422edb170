//! Unit tests of the configuration: routing, refused documents and environment
//! overrides.

use super::*;

const BASE: &str = r#"
        default_queue = "massive"
        [producers.k]
        kind = "kafka"
        brokers = "127.0.0.1:19092"
        [producers.r]
        kind = "rocketmq"
        namesrv = "127.0.0.1:9876"
        [queues.massive]
        topic = "t-massive"
        primary = "k"
        backup = "r"
        ratio = 70
        [queues.special]
        topic = "t-special"
        primary = "r"
        backup = "k"
        [types.cash]
        max_amount = 100
        [types.coupon]
        queue = "special"
    "#;

fn with(extra: &str) -> Result<SdkConfig, ConfigError> {
    SdkConfig::from_toml_str(&format!("{BASE}\n{extra}"))
}

#[test]
fn routes_types_to_queues() {
    let c = with("").unwrap();
    assert_eq!(c.routing.route("cash").map(|r| r.0), Some("massive"));
    assert_eq!(c.routing.route("coupon").map(|r| r.0), Some("special"));
    assert_eq!(c.routing.queue_for("coupon").map(|q| q.ratio), Some(100));
    assert_eq!(c.routing.route("coin"), None);
    assert_eq!(c.routing.max_amount("cash"), Some(100));
    assert_eq!(c.routing.max_amount("coupon"), Some(1_000_000_000_000));
}

#[test]
fn refuses_inconsistent_documents() {
    let bad = [
        (
            "[queues.x]\ntopic = \"t\"\nprimary = \"nope\"\nbackup = \"k\"",
            "no producer",
        ),
        ("[types.coin]\nqueue = \"nope\"", "no queue named"),
        (
            "[queues.y]\ntopic = \"t y\"\nprimary = \"k\"\nbackup = \"k\"",
            "topic",
        ),
        (
            "[queues.y]\ntopic = \"t\"\nprimary = \"k\"\nbackup = \"k\"\nratio = 101",
            "ratio",
        ),
        ("[batch]\nmax_events = 0", "batch"),
        ("[batch]\nin_flight_batches = 0", "in_flight_batches"),
        ("[batch]\nin_flight_batches = 70000", "in_flight_batches"),
        ("[store]\nmax_tokens_per_user = 0", "store"),
        ("[store]\nmax_pending = 0", "max_pending"),
        ("[store]\nmax_pending = 2000000", "max_pending"),
        ("[store]\nretry_for_ms = 0", "retry_for_ms"),
        (
            "[store]\nttl_secs = 60\nretry_for_ms = 60000",
            "retry_for_ms",
        ),
        ("[store]\nwrite_mode = \"fast\"", "write_mode"),
        (
            "[store]\nstrict = true\nwrite_mode = \"deferred\"",
            "strict = true needs",
        ),
        ("[types.coin]\nmax_amount = 0", "max_amount"),
        (
            "[store]\nqueue_after_ms = 1000\nwrite_wait_ms = 1000",
            "queue_after_ms (1000) must be below store.write_wait_ms",
        ),
    ];
    for (extra, want) in bad {
        let err = with(extra).expect_err(extra).to_string();
        assert!(err.contains(want), "{extra}: {err}");
    }
    // Unknown keys are typos, not silently ignored.
    let err = with("[batch]\nlinger = 5").unwrap_err();
    assert!(matches!(err, ConfigError::Parse(_)), "{err}");
    let err = with("[queues.a]\ntopic = 1").unwrap_err();
    assert!(matches!(err, ConfigError::Parse(_)), "{err}");
}

#[test]
fn env_overrides_reach_nested_keys() {
    let mut doc: toml::Table = BASE.parse().unwrap();
    apply_env(
        &mut doc,
        [
            (
                "REWARD_SDK__QUEUES__MASSIVE__RATIO".to_string(),
                "5".to_string(),
            ),
            ("REWARD_SDK__STORE__REDIS_URL".into(), "redis://x:1".into()),
            ("REWARD_SDK__STORE__STRICT".into(), "true".into()),
            ("REWARD_SDK__STORE__WRITE_MODE".into(), "direct".into()),
            ("OTHER".into(), "ignored".into()),
        ],
    )
    .unwrap();
    let c = SdkConfig::from_table(&doc).unwrap();
    assert_eq!(c.routing.queues["massive"].ratio, 5);
    assert_eq!(c.store.redis_url, "redis://x:1");
    assert!(c.store.strict);
    let err = apply_env(
        &mut doc,
        [("REWARD_SDK__QUEUES__MASSIVE__RATIO__X".into(), "1".into())],
    );
    assert!(err.is_err());
}

#[test]
fn producer_settings_take_numbers_booleans_and_env_overrides_as_text() {
    let mut doc: toml::Table = BASE.parse().unwrap();
    let k = doc["producers"]["k"].as_table().unwrap().clone();
    let mut k = k;
    k.insert(
        "settings".into(),
        toml::Value::Table(
            r#""linger.ms" = 10
               "acks" = "all""#
                .parse()
                .unwrap(),
        ),
    );
    doc["producers"]
        .as_table_mut()
        .unwrap()
        .insert("k".into(), toml::Value::Table(k));
    apply_env(
        &mut doc,
        [(
            "REWARD_SDK__PRODUCERS__K__SETTINGS__ENABLE.IDEMPOTENCE".to_string(),
            "false".to_string(),
        )],
    )
    .unwrap();
    let c = SdkConfig::from_table(&doc).unwrap();
    let ProducerConfig::Kafka { settings, .. } = &c.producers["k"] else {
        panic!("producer k is not kafka");
    };
    assert_eq!(settings["linger.ms"], "10");
    assert_eq!(settings["acks"], "all");
    assert_eq!(settings["enable.idempotence"], "false");

    // A table is no client setting: refused with its name.
    let mut bad = doc.clone();
    bad["producers"]["k"]["settings"]
        .as_table_mut()
        .unwrap()
        .insert("nested".into(), toml::Value::Table(toml::Table::new()));
    let err = SdkConfig::from_table(&bad).unwrap_err();
    assert!(err.to_string().contains("nested"), "{err}");
}
