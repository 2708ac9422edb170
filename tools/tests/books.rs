//! `reward-ctl books` against the real Redis: a credited, sent reward passes; a credit
//! nobody sent and a sent reward nobody credited each fail their row; a malformed sent
//! list is refused before anything is read. Needs the local stack (`ops/stack up`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::process::Command;

use reward_service::downstream::{Credit, Downstream as _, Ledger};
use reward_stack::env::StackEnv;
use reward_tools::books::SentReward;

fn sent(trade: &str, amount: i64) -> SentReward {
    SentReward {
        trade_no: trade.into(),
        user_id: "u1".into(),
        activity_id: "act".into(),
        scene_id: "rain".into(),
        reward_type: "cash".into(),
        amount,
        sent_unix_ms: reward_runtime::clock::now_ms(),
        stored: true,
    }
}

fn books(env: &StackEnv, tag: &str, list: &std::path::Path, extra: &[&str]) -> (i32, String) {
    reward_testkit::output(
        Command::new(env!("CARGO_BIN_EXE_reward-ctl"))
            .args(["--redis", &env.redis_url, "books", "--sent"])
            .arg(list)
            .args(["--token-prefix", &format!("bkt-{tag}")])
            .args(["--claims-prefix", &format!("bkc-{tag}")])
            .args(["--claims-shards", "4"])
            .args(["--ledger-prefix", &format!("bkl-{tag}")])
            .args(extra),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_books_pass_only_when_what_was_sent_is_what_was_credited() {
    let env = StackEnv::from_env();
    assert!(
        std::net::TcpStream::connect(env.redis_host_port().unwrap()).is_ok(),
        "Redis is not answering; start the local stack with `ops/stack up`"
    );
    let tag = format!("{:08x}", rand::random::<u32>());
    let dir = std::env::temp_dir().join(format!("books-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let list = dir.join("sent.tsv");
    std::fs::write(&list, format!("{}\n", sent("t1", 5).line(false))).unwrap();
    let ledger = Ledger::connect(&env.redis_url, &format!("bkl-{tag}"), &HashMap::new())
        .await
        .unwrap();
    let credit = |trade: &str, amount: i64| Credit {
        trade_no: trade.into(),
        user_id: "u1".into(),
        reward_type: "cash".into(),
        amount,
    };

    // Sent, not credited: `credited once` fails (and the token, never written, is
    // excused by the counted write failure).
    let (code, out) = books(&env, &tag, &list, &["--token-write-failures", "1"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("credited once") && out.contains("0 of 1 trade numbers credited"),
        "{out}"
    );

    // Credited once: every row passes.
    ledger.credit(&credit("t1", 5)).await.unwrap();
    let (code, out) = books(&env, &tag, &list, &["--token-write-failures", "1"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("books: PASS"), "{out}");

    // The token the SDK said it stored is not there: `tokens` fails without the excuse.
    let (code, out) = books(&env, &tag, &list, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("1 sent without a stored token"), "{out}");

    // A scene whose budget shows no spending while a credit was made: `budget` fails.
    let (code, out) = books(
        &env,
        &tag,
        &list,
        &["--token-write-failures", "1", "--budget", "act/rain=100"],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("act/rain: spent 0, credited 5, budget 100"),
        "{out}"
    );

    // A credit nobody sent: `nothing extra` fails.
    ledger.credit(&credit("t9", 3)).await.unwrap();
    let (code, out) = books(&env, &tag, &list, &["--token-write-failures", "1"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("1 credited trade numbers that were never sent"),
        "{out}"
    );

    // A malformed list: refused with its line, exit 2.
    std::fs::write(&list, "t1\tu1\n").unwrap();
    let (code, out) = books(&env, &tag, &list, &[]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("line 1: malformed"), "{out}");
    // A bad budget argument: refused by the parser.
    let (code, out) = books(&env, &tag, &list, &["--budget", "rain=5"]);
    assert_eq!(code, 2, "{out}");

    reward_tools::clean::clean(
        &env.redis_url,
        &reward_tools::clean::Selection::Runs {
            families: vec!["bkl-".into()],
            tags: [tag.clone()].into(),
        },
        false,
        None,
        |_, _| {},
    )
    .await
    .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Rewards of a dead sender, none stored nor credited: one answered after its token
/// was stored, or after a broker held its event, is missing (never excused), one
/// answered before anything held it and one unanswered are lost with the sender, told
/// apart, within the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_rewards_never_said_held_are_excused_with_a_dead_sender() {
    use reward_tools::books::{Excused, Expected, Marked, Stores, check};
    let env = StackEnv::from_env();
    assert!(
        std::net::TcpStream::connect(env.redis_host_port().unwrap()).is_ok(),
        "Redis is not answering; start the local stack with `ops/stack up`"
    );
    let tag = format!("{:08x}", rand::random::<u32>());
    let at = Stores {
        redis_url: env.redis_url.clone(),
        ledger_redis_url: env.redis_url.clone(),
        token_prefix: format!("bkt-{tag}"),
        claims_prefix: format!("bkc-{tag}"),
        claims_shards: 4,
        ledger_prefix: format!("bkl-{tag}"),
    };
    let marked = [
        ("s1", Marked::Stored),
        ("a1", Marked::Answered),
        ("d1", Marked::InDoubt),
    ];
    let expected = |marks: &[(&str, Marked)]| Expected {
        sent: marks
            .iter()
            .map(|(t, _)| (t.to_string(), sent(t, 5)))
            .collect(),
        excused: Some(Excused {
            rewards: marks.iter().map(|(t, m)| (t.to_string(), *m)).collect(),
            bound: 3,
        }),
        ..Expected::default()
    };
    let row = |r: &reward_tools::books::Reconciliation, name: &str| {
        r.checks
            .iter()
            .find(|c| c.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("no row {name}: {}", r.table()))
    };

    // All three: the stored one is missing, the other two are lost, told apart.
    let r = check(&at, &expected(&marked)).await.unwrap();
    assert!(!row(&r, "credited once").pass, "{}", r.table());
    assert_eq!(
        (r.lost_with_host, r.lost_answered, r.lost_unanswered),
        (2, 1, 1),
        "{}",
        r.table()
    );
    assert!(row(&r, "lost with a killed host").pass, "{}", r.table());

    // Without the stored one, the books pass: the other two are excused.
    let r = check(&at, &expected(&marked[1..])).await.unwrap();
    assert!(r.passed(), "{}", r.table());
    assert_eq!((r.credited, r.lost_with_host), (0, 2), "{}", r.table());

    // More lost than the bound allows: the row fails.
    let mut tight = expected(&marked[1..]);
    if let Some(ex) = tight.excused.as_mut() {
        ex.bound = 1;
    }
    let r = check(&at, &tight).await.unwrap();
    assert!(!row(&r, "lost with a killed host").pass, "{}", r.table());

    // One answered once a broker held its event (Redis did not answer): never
    // excused either; missing is missing.
    let queued = [("q1", Marked::Queued), ("a1", Marked::Answered)];
    let r = check(&at, &expected(&queued)).await.unwrap();
    assert!(!row(&r, "credited once").pass, "{}", r.table());
    assert_eq!((r.lost_with_host, r.lost_answered), (1, 1), "{}", r.table());
}
