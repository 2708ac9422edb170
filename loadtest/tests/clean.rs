//! `loadtest clean DIR` against the stack's Redis: it removes exactly the run's keys
//! (every replay family, that tag), leaves another run's and the benches' alone, marks
//! the manifest, and a later reconcile says why it has nothing to check. Needs the
//! local stack (`ops/stack up`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::process::Command;

use fred::prelude::*;
use reward_stack::env::StackEnv;

fn loadtest(args: &[&str]) -> (i32, String) {
    reward_testkit::output(
        Command::new(env!("CARGO_BIN_EXE_loadtest"))
            .args(args)
            .current_dir(reward_testkit::repo()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_removes_exactly_the_runs_keys_and_marks_its_manifest() {
    let env = StackEnv::from_env();
    assert!(
        std::net::TcpStream::connect(env.redis_host_port().unwrap()).is_ok(),
        "Redis is not answering; start the local stack with `ops/stack up`"
    );
    let tag = format!("{:08x}", rand::random::<u32>());
    let other = format!("{:08x}", rand::random::<u32>());
    assert_ne!(tag, other);
    let client = Builder::from_config(Config::from_url(&env.redis_url).unwrap())
        .build()
        .unwrap();
    client.init().await.unwrap();

    let mine: Vec<String> = vec![
        format!("ltt-{tag}:{{u1}}:cny"),
        format!("ltt-{tag}:{{u1}}:cny:credited"),
        format!("ltc-{tag}:{{rain:3}}:budget"),
        format!("ltl-{tag}:{{u1}}:balance"),
        format!("ltd-{tag}:delayed"),
        format!("ltcfg-{tag}"),
        format!("ltcfg-{tag}:audit"),
    ];
    let kept: Vec<String> = vec![
        format!("ltt-{other}:{{u1}}:cny"),   // another run
        format!("gbl-{tag}:{{u1}}:balance"), // a bench family, same tag
        format!("ltt-{tag}0:{{u1}}:cny"),    // not this tag
        format!("test-{tag}"),               // not the load tester's
    ];
    for k in mine.iter().chain(&kept) {
        let _: () = client.hset(k, ("f", "v")).await.unwrap();
    }

    let dir = std::env::temp_dir().join(format!("clean-test-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = serde_json::json!({
        "tag": tag,
        "profile": "rain",
        "redis_url": env.redis_url,
        "token_prefix": format!("ltt-{tag}"),
        "claims_prefix": format!("ltc-{tag}"),
        "claims_shards": 16,
        "ledger_prefix": format!("ltl-{tag}"),
        "budgets": {},
        "limits": {},
        "topics": {},
        "started_unix_ms": 1,
        "token_write_failures": 0,
    });
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    let d = dir.to_str().unwrap();

    let (code, out) = loadtest(&["clean", d, "--dry-run"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("7 keys would be removed"), "{out}");
    let (code, out) = loadtest(&["clean", d]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("clean: 7 keys removed"), "{out}");

    let mut left = BTreeSet::new();
    for k in mine.iter().chain(&kept) {
        let n: i64 = client.exists(k).await.unwrap();
        if n == 1 {
            left.insert(k.clone());
        }
    }
    assert_eq!(left, kept.iter().cloned().collect::<BTreeSet<_>>());
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    assert!(m["cleaned_unix_ms"].as_i64().unwrap() > 0, "{m}");

    let (code, out) = loadtest(&["reconcile", d]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("nothing to reconcile"), "{out}");

    // No run directory, or one without a manifest: a clear refusal.
    let (code, out) = loadtest(&["clean"]);
    assert_eq!(code, 2, "{out}");
    let empty = std::env::temp_dir().join(format!("clean-test-empty-{tag}"));
    std::fs::create_dir_all(&empty).unwrap();
    let (code, out) = loadtest(&["clean", empty.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("manifest.json"), "{out}");

    // One key per command: on a Redis Cluster the kept keys lie in different slots.
    for k in &kept {
        let _: i64 = client.del(k).await.unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&empty);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_runs_keys_are_left_alone_and_taken_once_it_ends() {
    let redis = reward_testkit::redis_url();
    let client = Builder::from_config(Config::from_url(&redis).unwrap())
        .build()
        .unwrap();
    client.init().await.unwrap();
    let live = reward_tools::clean::LiveRun::start(&[redis.as_str()])
        .await
        .unwrap();
    let running = live.tag().to_string();
    let dead = format!("{:08x}", rand::random::<u32>());
    assert_ne!(running, dead);
    let ttl: i64 = client
        .ttl(reward_tools::clean::live_key(&running))
        .await
        .unwrap();
    assert!(ttl > 0, "the live mark has no TTL ({ttl})");
    let keys = |tag: &str| -> Vec<String> {
        vec![
            format!("ltt-{tag}:{{u1}}:cny"),
            format!("ltc-{tag}:{{rain.3}}:t:x"),
            format!("gbl-{tag}:{{u1}}"),
        ]
    };
    for k in keys(&running).iter().chain(&keys(&dead)) {
        let _: () = client.set(k, "v", None, None, false).await.unwrap();
    }
    let sel = reward_tools::clean::Selection::Runs {
        families: ["ltt-", "ltc-", "gbl-"].map(String::from).to_vec(),
        tags: [running.clone(), dead.clone()].into(),
    };
    let exists = |ks: Vec<String>| {
        let client = client.clone();
        async move {
            let mut n = 0;
            for k in ks {
                n += client.exists::<i64, _>(k).await.unwrap();
            }
            n
        }
    };

    // The running run keeps all of its keys; the dead one loses all of its.
    let none = BTreeSet::new();
    let done = reward_tools::clean::clean(&redis, &sel, false, Some(&none), |_, _| {})
        .await
        .unwrap();
    assert_eq!(done.removed, 3, "{done:?}");
    assert_eq!(
        done.live.keys().cloned().collect::<Vec<_>>(),
        vec![running.clone()],
        "{done:?}"
    );
    // The mark names its holder, this process.
    let holder = &done.live[&running];
    assert!(
        holder.starts_with(&format!("pid {} on ", std::process::id())),
        "{holder}"
    );
    // A tag the caller already knows to be live (found on a run's other Redis) is
    // kept without a mark here.
    let other = format!("{:08x}", rand::random::<u32>());
    let _: () = client
        .set(format!("ltt-{other}:{{u2}}:cny"), "v", None, None, false)
        .await
        .unwrap();
    let sel_other = reward_tools::clean::Selection::Runs {
        families: vec!["ltt-".into()],
        tags: [other.clone()].into(),
    };
    let known = BTreeSet::from([other.clone()]);
    let done = reward_tools::clean::clean(&redis, &sel_other, false, Some(&known), |_, _| {})
        .await
        .unwrap();
    assert_eq!(done.removed, 0, "{done:?}");
    let done = reward_tools::clean::clean(&redis, &sel_other, false, Some(&none), |_, _| {})
        .await
        .unwrap();
    assert_eq!(done.removed, 1, "{done:?}");
    assert_eq!(exists(keys(&running)).await, 3);
    assert_eq!(exists(keys(&dead)).await, 0);

    // `loadtest clean DIR` of the running run: its keys stay, its manifest unmarked.
    let dir = std::env::temp_dir().join(format!("clean-live-test-{running}"));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = serde_json::json!({
        "tag": running, "profile": "rain", "redis_url": redis,
        "token_prefix": format!("ltt-{running}"), "claims_prefix": format!("ltc-{running}"),
        "claims_shards": 16, "ledger_prefix": format!("ltl-{running}"), "budgets": {},
        "limits": {}, "topics": {}, "started_unix_ms": 1, "token_write_failures": 0,
    });
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    let (code, out) = loadtest(&["clean", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("nothing cleaned: run {running} (pid ")),
        "{out}"
    );
    assert_eq!(exists(keys(&running)).await, 3);
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    assert!(m["cleaned_unix_ms"].is_null(), "{m}");

    // A second process holding the same run (`loadtest wallet` on it): the first
    // one's end leaves the run live.
    let second = reward_tools::clean::LiveRun::hold(&[redis.as_str()], &running)
        .await
        .unwrap();
    live.end().await;
    let (code, out) = loadtest(&["clean", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("nothing cleaned"), "{out}");
    assert_eq!(exists(keys(&running)).await, 3);

    // Once the run ends, its keys are leftovers like any other's.
    second.end().await;
    let n: i64 = client
        .exists(reward_tools::clean::live_key(&running))
        .await
        .unwrap();
    assert_eq!(n, 0, "the mark outlived its run's end");
    let (code, out) = loadtest(&["clean", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("clean: 2 keys removed"), "{out}");
    // A bench family is not a replay's: the explicit clean took only the replay's two.
    assert_eq!(exists(keys(&running)).await, 1);
    let done = reward_tools::clean::clean(&redis, &sel, false, Some(&none), |_, _| {})
        .await
        .unwrap();
    assert_eq!(done.removed, 1, "{done:?}");
    assert!(done.live.is_empty(), "{done:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
