//! Tests of the configuration: a valid document with overrides, refused documents
//! with their reasons, the shipped config, credentials and downstream settings.

use super::*;

const DOC: &str = r#"
        [budgets]
        "cny/rain" = 1000
        [downstreams.cash]
        kind = "ledger"
        capacity = 2000
        [downstreams.coupon]
        kind = "http"
        url = "http://127.0.0.1:9000/credit"
        [sdk]
        default_queue = "massive"
        [sdk.producers.k]
        kind = "kafka"
        brokers = "127.0.0.1:19092"
        [sdk.producers.r]
        kind = "rocketmq"
        namesrv = "127.0.0.1:9876"
        group = "g"
        [sdk.queues.massive]
        topic = "massive"
        primary = "k"
        backup = "r"
        [sdk.queues.failures]
        topic = "failures"
        primary = "k"
        backup = "r"
        [sdk.types.cash]
    "#;

fn env(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v = vec![
        (
            "REWARD_SERVICE_TOKEN".to_string(),
            "a-long-enough-credential".to_string(),
        ),
        (
            "REWARD_WALLET_TOKEN".to_string(),
            "another-wallet-credential".to_string(),
        ),
    ];
    v.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    v
}

#[test]
fn a_valid_document_with_overrides() {
    let c = ServiceConfig::from_toml_str(
        DOC,
        &env(&[
            ("REWARD_SERVICE__CLAIMS__SHARDS", "32"),
            ("REWARD_SERVICE__SERVER__HTTP_ADDR", "127.0.0.1:9999"),
        ]),
    )
    .unwrap();
    assert_eq!(c.claims.shards, 32);
    assert_eq!(c.server.http_addr.port(), 9999);
    assert_eq!(c.budgets["cny/rain"], 1000);
    assert_eq!(c.failure_queue, "failures");
    assert_eq!(
        c.downstreams["coupon"],
        DownstreamConfig::Http {
            url: "http://127.0.0.1:9000/credit".into(),
            timeout_ms: 2000,
            honours_key: false,
            status_url: None,
        }
    );
    assert!(c.credential.matches(b"a-long-enough-credential"));
    assert!(!c.credential.matches(b"a-long-enough-credentiaL"));
    assert!(!c.credential.matches(b"a-long-enough-credential-"));
    let printed = format!("{c:?}");
    assert!(!printed.contains("a-long-enough"), "{printed}");
}

#[test]
fn bad_documents_are_refused_with_a_reason() {
    let cases: [(&str, &str); 12] = [
        // A takeover could start while the ledger's call (5 s) still lands.
        ("[claims]\nlease_ms = 2000\n", "shorter than downstream"),
        // Tokens (7 days by default) would outlive their records.
        ("[claims]\nretention_secs = 60\n", "sdk.token.ttl_secs"),
        (
            "[downstreams.gem]\nkind = \"ledger\"\nmax_amount = 0\n",
            "max_amount",
        ),
        (
            "[downstreams.gem]\nkind = \"ledger\"\nstatus_url = \"http://x/s\"\n",
            "takes no url",
        ),
        ("[claims]\nshards = 0\n", "claims.shards"),
        ("[budgets]\nrain = 5\n", "activity/scene"),
        ("[budgets]\n\"a/b\" = -5\n", "negative"),
        ("[downstreams.gem]\nkind = \"magic\"\n", "magic"),
        ("[downstreams.gem]\nkind = \"http\"\n", "needs url"),
        ("[failures]\nqueue = \"nope\"\n", "nope"),
        ("[server]\ngrpc_addr = \"here\"\n", "grpc_addr"),
        ("[server]\nunknown_knob = 1\n", "unknown"),
    ];
    for (extra, want) in cases {
        // Later tables of the same name would clash: put the extra first.
        let doc = format!(
            "{extra}\n{}",
            DOC.replace("[budgets]\n        \"cny/rain\" = 1000", "")
        );
        let e = ServiceConfig::from_toml_str(&doc, &env(&[])).unwrap_err();
        assert!(e.to_string().contains(want), "{extra}: {e}");
    }
}

#[test]
fn the_shipped_local_stack_config_is_valid() {
    let text = include_str!("../../../ops/reward-service.toml");
    let c = ServiceConfig::from_toml_str(text, &env(&[])).unwrap();
    assert_eq!(c.failure_queue, "failures");
    assert!(c.downstreams.contains_key("coupon"));
}

#[test]
fn the_credential_is_required_and_long() {
    let e = ServiceConfig::from_toml_str(DOC, &[]).unwrap_err();
    assert!(matches!(e, ConfigError::Credential(_)), "{e}");
    let short = vec![("REWARD_SERVICE_TOKEN".to_string(), "short".to_string())];
    let e = ServiceConfig::from_toml_str(DOC, &short).unwrap_err();
    assert!(matches!(e, ConfigError::Credential(_)), "{e}");
    assert!(!e.to_string().contains("short"));
    let dir = std::env::temp_dir().join(format!("cred-{:08x}", rand::random::<u32>()));
    std::fs::write(&dir, "from-a-file-credential-123\n").unwrap();
    let wallet = (
        "REWARD_WALLET_TOKEN".to_string(),
        "the-wallet-credential-456".to_string(),
    );
    let file = vec![
        (
            "REWARD_SERVICE_TOKEN_FILE".to_string(),
            dir.display().to_string(),
        ),
        wallet.clone(),
    ];
    let c = ServiceConfig::from_toml_str(DOC, &file).unwrap();
    assert!(c.credential.matches(b"from-a-file-credential-123"));
    assert!(c.wallet_credential.matches(b"the-wallet-credential-456"));
    assert!(!c.credential.matches(b"the-wallet-credential-456"));
    let _ = std::fs::remove_file(dir);
    // The wallet credential is required, and may not be the grant credential.
    let no_wallet = vec![(
        "REWARD_SERVICE_TOKEN".to_string(),
        "the-wallet-credential-456".to_string(),
    )];
    let e = ServiceConfig::from_toml_str(DOC, &no_wallet).unwrap_err();
    assert!(e.to_string().contains("REWARD_WALLET_TOKEN"), "{e}");
    let metrics_as_wallet = vec![
        no_wallet[0].clone(),
        wallet.clone(),
        (
            "REWARD_METRICS_TOKEN".to_string(),
            "the-wallet-credential-456".to_string(),
        ),
    ];
    let e = ServiceConfig::from_toml_str(DOC, &metrics_as_wallet).unwrap_err();
    assert!(e.to_string().contains("REWARD_METRICS_TOKEN"), "{e}");
    let same = vec![no_wallet[0].clone(), wallet];
    let e = ServiceConfig::from_toml_str(DOC, &same).unwrap_err();
    assert!(e.to_string().contains("must differ"), "{e}");
    assert!(!e.to_string().contains("the-wallet-credential"), "{e}");
}

#[test]
fn downstream_promises_and_ceilings_are_read_and_urls_never_echoed() {
    let doc = DOC
        .replace(
            "capacity = 2000",
            "capacity = 2000\nhonours_idempotency_key = true\nmax_amount = 500",
        )
        .replace(
            "url = \"http://127.0.0.1:9000/credit\"",
            "url = \"http://wallet:pw-secret@127.0.0.1:9000/credit\"\n\
             status_url = \"http://127.0.0.1:9000/status\"\n\
             honours_idempotency_key = true\ntimeout_ms = 1500",
        );
    let c = ServiceConfig::from_toml_str(&doc, &env(&[])).unwrap();
    assert_eq!(c.max_amounts.get("cash"), Some(&500));
    assert_eq!(
        c.downstreams["cash"],
        DownstreamConfig::Ledger {
            capacity: NonZeroU32::new(2000),
            honours_key: true
        }
    );
    assert_eq!(c.downstreams["coupon"].max_call_ms(), 1500);
    let shown = format!("{c:?}");
    assert!(!shown.contains("pw-secret"), "{shown}");
    let bad = doc.replace("http://127.0.0.1:9000/status", "ftp://u:pw-secret@h/s");
    let e = ServiceConfig::from_toml_str(&bad, &env(&[]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("status_url") && !e.contains("pw-secret"), "{e}");
}

#[test]
fn wallet_sessions_and_origins_are_checked() {
    // No session keys: sessions are off, the service still starts.
    let c = ServiceConfig::from_toml_str(DOC, &env(&[])).unwrap();
    assert!(c.wallet.sessions.is_none());
    assert!(c.wallet.cors_origins.is_empty());
    // Keys from the environment (text form), with the minting key chosen.
    let ring = sdk::token::KeyRing::random(2).to_text();
    let c = ServiceConfig::from_toml_str(
        DOC,
        &env(&[
            ("REWARD_SESSION_KEYS", ring.as_str()),
            ("REWARD_SESSION_CURRENT_KEY", "1"),
        ]),
    )
    .unwrap();
    assert_eq!(
        c.wallet.sessions.as_ref().map(|s| s.ring().current_id()),
        Some(1)
    );
    // The key material never reaches the config's Debug.
    let shown = format!("{c:?}");
    for line in ring.lines() {
        let key = line.split_once(':').unwrap().1;
        assert!(!shown.contains(key), "a session key in Debug");
    }
    for (extra, env_extra, want) in [
        (
            "[wallet]\ncors_origins = [\"*\"]\n",
            vec![],
            "must start with https://",
        ),
        (
            "[wallet]\ncors_origins = [\"https://a.example/path\"]\n",
            vec![],
            "no path",
        ),
        (
            "[wallet]\nsession_keys_file = \"/nonexistent/keys\"\n",
            vec![],
            "session keys: cannot read key file /nonexistent/keys",
        ),
        (
            "",
            vec![("REWARD_SESSION_KEYS", "1:c2hvcnQ=")],
            "exactly 32 bytes",
        ),
        (
            "[wallet]\ncors_origins = [\"https://Wallet.example\"]\n",
            vec![],
            "lower case",
        ),
        (
            "[wallet]\ncors_origins = [\"https://wallet.example:443\"]\n",
            vec![],
            "default port",
        ),
        (
            "[wallet]\nsession_keys_file = \"/k\"\n",
            vec![("REWARD_SESSION_KEYS_FILE", "/k2")],
            "keep one source",
        ),
        (
            "",
            vec![
                ("REWARD_SESSION_KEYS", ring.as_str()),
                ("REWARD_SESSION_CURRENT_KEY", "9"),
            ],
            "session keys: current key id 9",
        ),
    ] {
        let doc = format!("{extra}{DOC}");
        let err = ServiceConfig::from_toml_str(&doc, &env(&env_extra))
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{extra:?}: {err}");
        assert!(!err.contains(ring.lines().next().unwrap().split_once(':').unwrap().1));
    }
}

#[test]
fn unproven_events_are_refused_unless_a_stated_window_accepts_them() {
    let doc = |events: &str| format!("{events}\n{DOC}");
    let c = ServiceConfig::from_toml_str(DOC, &env(&[])).unwrap();
    assert_eq!(c.events.accept_unproven_until_ms, None, "refuse by default");
    let now = reward_runtime::clock::now_ms();
    let soon = reward_runtime::clock::format_utc(now + 86_400_000);
    let c = ServiceConfig::from_toml_str(
        &doc(&format!(
            "[events]\nunproven = \"accept\"\naccept_unproven_until = \"{soon}\"\n"
        )),
        &env(&[]),
    )
    .unwrap();
    let until = c.events.accept_unproven_until_ms.unwrap();
    assert!(until > now && until <= now + 86_400_000, "{until}");
    let far = reward_runtime::clock::format_utc(now + 31 * 86_400_000);
    let cases = [
        (
            "[events]\nunproven = \"accept\"\n".to_string(),
            "needs events.accept_unproven_until",
        ),
        (
            format!("[events]\nunproven = \"accept\"\naccept_unproven_until = \"{far}\"\n"),
            "more than 30 days",
        ),
        (
            "[events]\nunproven = \"accept\"\naccept_unproven_until = \"tomorrow\"\n".into(),
            "not a UTC time",
        ),
        (
            format!("[events]\naccept_unproven_until = \"{soon}\"\n"),
            "is \"refuse\"",
        ),
        ("[events]\nunproven = \"allow\"\n".into(), "\"allow\""),
    ];
    for (events, want) in cases {
        let e = ServiceConfig::from_toml_str(&doc(&events), &env(&[])).unwrap_err();
        assert!(e.to_string().contains(want), "{events}: {e}");
    }
}
