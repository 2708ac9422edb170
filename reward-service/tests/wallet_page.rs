//! The reference wallet page in a real browser (Debian's headless Chromium over
//! WebDriver, `reward_testkit::browser`), against a running service on the local stack,
//! and the wallet sessions it runs on.
//!
//! Screenshots at phone and desktop widths go to `$CARGO_TARGET_TMPDIR/wallet-page/`
//! (under the target directory's `tmp/`); each test prints where.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use common::{WALLET_CREDENTIAL, create_topics, service_config, tampered, unique_dir};
use proto::v1::RewardToken;
use reward_service::downstream::Ledger;
use reward_service::server::{Running, start};
use reward_testkit::browser::{Browser, DESKTOP, PHONE};
use sdk::request::{RedEnvelopeRain, User};
use sdk::session::SessionCodec;
use sdk::token::KeyRing;
use serde_json::{Value, json};

/// How long the page may take to show something on a busy machine.
const PAGE: Duration = Duration::from_secs(60);
const ORIGIN: &str = "https://wallet.example.com";

fn shots(test: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("wallet-page")
        .join(test)
}

/// A service with session keys (a file in its directory) and one CORS origin, taking
/// at most `max_tokens` tokens per request; the codec that mints its sessions, from
/// the same file.
async fn running(tag: &str, max_tokens: usize) -> (Running, SessionCodec, PathBuf) {
    create_topics(tag).await;
    let dir = unique_dir(tag);
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("session-keys");
    std::fs::write(&keys, KeyRing::random(2).to_text().as_bytes()).unwrap();
    let extra = format!(
        "[wallet]\nsession_keys_file = \"{}\"\ncors_origins = [\"{ORIGIN}\"]\n",
        keys.display()
    );
    let mut cfg = service_config(tag, &dir, 1_000_000, &extra);
    cfg.server.max_tokens_per_request = max_tokens;
    let codec = SessionCodec::new(KeyRing::from_file(&keys, None).unwrap());
    (start(&cfg).await.unwrap(), codec, dir)
}

fn now_ms() -> u64 {
    u64::try_from(reward_runtime::clock::now_ms()).unwrap()
}

fn page_url(r: &Running, session: &str) -> String {
    format!("http://{}/wallet/#session={session}", r.http_addr)
}

/// The page has finished a load (or a withdrawal) and shows the wallet.
const READY: &str = "return document.getElementById('status').dataset.kind === 'ready' \
                     && document.getElementById('main').getAttribute('aria-busy') === 'false';";

/// What the page shows: trade numbers per list, the balance table, the notes.
async fn shown(b: &Browser) -> Value {
    b.eval(
        r#"
        const trades = (id) => [...document.querySelectorAll('#' + id + ' li')].map((li) => li.dataset.trade).sort();
        const balance = {};
        for (const tr of document.querySelectorAll('#balance tbody tr')) {
          const n = (c) => Number(tr.querySelector('td.' + c).textContent.replace(/[^0-9-]/g, ''));
          balance[tr.dataset.type] = { credited: n('credited'), pending: n('pending'), total: n('total') };
        }
        const notes = {};
        for (const li of document.querySelectorAll('#notes li')) notes[li.dataset.note] = li.textContent;
        const results = {};
        for (const li of document.querySelectorAll('#results li')) results[li.dataset.trade] = li.querySelector('.outcome').dataset.result;
        return {
          pending: trades('pending'), credited: trades('credited'), balance, notes, results,
          empty: !document.getElementById('empty').hidden,
          problem: document.getElementById('problem').hidden ? null : document.getElementById('problem').dataset.code,
          status: document.getElementById('status').textContent,
          hash: location.hash,
          overflow: document.documentElement.scrollWidth > window.innerWidth,
        };
        "#,
        json!([]),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wallet_page_merges_kept_codes_and_withdraws_exactly_the_legal_ones() {
    let tag = format!("wp{:08x}", rand::random::<u32>());
    // Two tokens a request: the kept codes and the withdrawal go in batches, the
    // later ones merged by the page itself.
    let (r, codec, dir) = running(&tag, 2).await;
    let out = shots("withdraw");
    let sdk = r.service().sdk().clone();
    let cash = RedEnvelopeRain::new("cny", "cash");
    let coin = RedEnvelopeRain::new("cny", "coin");
    let (alice, bob) = (User::new("2001"), User::new("2002"));
    let mut sent = Vec::new();
    for (i, amount) in [(1, 100), (2, 200), (3, 300)] {
        sent.push(sdk.send_reward(cash.grab(&alice, i, amount)).await.unwrap());
    }
    sent.push(sdk.send_reward(coin.grab(&alice, 4, 5)).await.unwrap());
    let bobs = sdk.send_reward(cash.grab(&bob, 1, 7_000)).await.unwrap();
    assert_eq!(sdk.store().flush(Duration::from_secs(30)).await, 0);
    // Sealed with the service's keys for alice, never stored or granted: unknown.
    let stray = sdk
        .codec()
        .seal(&RewardToken {
            trade_no: "cny:rain:99:2001".into(),
            user_id: "2001".into(),
            activity_id: "cny".into(),
            scene_id: "rain".into(),
            reward_type: "cash".into(),
            amount: 50_000,
            ..Default::default()
        })
        .unwrap();

    // Alice's, granted straight through the service (a back-office grant): credited,
    // with no token in the store. The page learns of it only from the device.
    let granted_token = RewardToken {
        trade_no: "cny:rain:5:2001".into(),
        user_id: "2001".into(),
        activity_id: "cny".into(),
        scene_id: "rain".into(),
        reward_type: "cash".into(),
        amount: 50,
        grant_time_ms: reward_runtime::clock::now_ms(),
        ..Default::default()
    };
    let granted = sdk.codec().seal(&granted_token).unwrap();
    let g = r
        .service()
        .grant(&reward_service::service::event_of(&granted_token))
        .await;
    assert_eq!(g.outcome, proto::v1::GrantOutcome::Granted as i32, "{g:?}");

    // What Redis holds for alice, read by the service's own code, not the page's.
    let held = r.service().rewards("2001", "cny", &[]).await.unwrap();
    let mut want_pending: Vec<String> = held.pending.iter().map(|t| t.trade_no.clone()).collect();
    want_pending.sort();
    assert_eq!(want_pending.len(), 4);

    let session = codec
        .mint("2001", "cny", Duration::from_secs(600), now_ms())
        .unwrap();
    let b = Browser::start(PHONE).await;
    b.open(&page_url(&r, &session)).await;
    b.wait_for("the first load", READY, PAGE).await;
    let v = shown(&b).await;
    assert_eq!(v["hash"], "", "the session must leave the address bar: {v}");
    assert_eq!(v["pending"], json!(want_pending), "{v}");
    assert_eq!(v["credited"], json!([]));
    assert_eq!(
        v["balance"],
        json!({"cash": {"credited": 0, "pending": 600, "total": 600},
               "coin": {"credited": 0, "pending": 5, "total": 5}})
    );
    assert_eq!(v["overflow"], false, "wider than a phone: {v}");
    b.screenshot(&out.join("phone-pending.png")).await;

    // Codes the app kept: bob's, an edited one, one the service never stored, one of
    // alice's own (already listed: merged, not doubled) and the granted one. Two a
    // request: the first two go with the page request (merged by the server), the
    // other three are checked and merged by the page.
    for code in [
        bobs.token.clone(),
        tampered(&sent[1].token),
        stray.clone(),
        sent[0].token.clone(),
        granted.clone(),
    ] {
        b.type_into("#code", &code).await;
        b.click("#add").await;
        b.wait_for("the page after adding a code", READY, PAGE)
            .await;
    }
    let v = shown(&b).await;
    assert_eq!(v["pending"], json!(want_pending), "{v}");
    assert_eq!(v["credited"], json!(["cny:rain:5:2001"]), "{v}");
    assert_eq!(
        v["balance"],
        json!({"cash": {"credited": 50, "pending": 600, "total": 650},
               "coin": {"credited": 0, "pending": 5, "total": 5}}),
        "{v}"
    );
    let notes = v["notes"].as_object().unwrap();
    assert!(
        notes["unknown"].as_str().unwrap().starts_with("1 code "),
        "{v}"
    );
    assert!(
        notes["illegal"].as_str().unwrap().starts_with("2 codes "),
        "{v}"
    );
    let kept: Value = b
        .eval(
            "return JSON.parse(localStorage.getItem('reward-wallet:cny:2001'));",
            json!([]),
        )
        .await;
    assert_eq!(kept.as_array().unwrap().len(), 5);
    b.screenshot(&out.join("phone-kept-codes.png")).await;
    // The two that are not alice's can be forgotten; the unknown one stays (the
    // service may store it later), and so does her own.
    b.click("#forget").await;
    b.wait_for(
        "the page after forgetting",
        "return document.getElementById('status').textContent === 'Forgot 2 codes.';",
        PAGE,
    )
    .await;
    let kept: Value = b
        .eval(
            "return JSON.parse(localStorage.getItem('reward-wallet:cny:2001'));",
            json!([]),
        )
        .await;
    assert_eq!(kept, json!([stray, sent[0].token, granted]));
    let v = shown(&b).await;
    assert!(v["notes"].get("illegal").is_none(), "{v}");
    assert!(v["notes"].get("unknown").is_some(), "{v}");
    assert_eq!(v["pending"], json!(want_pending), "{v}");

    // Withdraw from the keyboard: Tab reaches the button, Enter presses it.
    b.eval("document.activeElement && document.activeElement.blur(); document.getElementById('main').focus();", json!([]))
        .await;
    let mut reached = false;
    for _ in 0..20 {
        b.press(&["\u{E004}"]).await;
        let id = b.eval("return document.activeElement.id;", json!([])).await;
        if id == "withdraw" {
            reached = true;
            break;
        }
    }
    assert!(reached, "Tab never reached the withdraw button");
    b.press(&["\u{E007}"]).await;
    b.wait_for(
        "the withdrawal's results",
        "return !document.getElementById('results-box').hidden && document.getElementById('status').textContent.startsWith('Withdrawal:');",
        PAGE,
    )
    .await;
    let v = shown(&b).await;
    let results: BTreeMap<String, String> = serde_json::from_value(v["results"].clone()).unwrap();
    assert_eq!(
        results,
        want_pending
            .iter()
            .map(|t| (t.clone(), "granted".to_string()))
            .collect::<BTreeMap<_, _>>(),
        "{v}"
    );
    assert_eq!(v["status"], "Withdrawal: 4 of 4 credited.");
    b.screenshot(&out.join("phone-withdrawn.png")).await;

    // The ledger credited exactly alice's four withdrawn and the one granted before,
    // once each; nothing for bob, nothing for the stray.
    let ledger = Ledger::connect(
        &common::redis_url(),
        &format!("ledger-{tag}"),
        &Default::default(),
    )
    .await
    .unwrap();
    let acct = ledger.account("2001").await.unwrap();
    let mut credited: Vec<String> = acct.credited.keys().cloned().collect();
    credited.sort();
    let mut want_credited = want_pending.clone();
    want_credited.push("cny:rain:5:2001".into());
    want_credited.sort();
    assert_eq!(credited, want_credited);
    assert_eq!(acct.balances.get("cash"), Some(&650));
    assert_eq!(acct.balances.get("coin"), Some(&5));
    assert_eq!(acct.double_credits, 0);
    let bob_acct = ledger.account("2002").await.unwrap();
    assert!(bob_acct.credited.is_empty(), "{bob_acct:?}");

    // A reload (the session kept for the tab) shows them credited.
    b.open(&format!("http://{}/wallet/", r.http_addr)).await;
    b.wait_for("the reload", READY, PAGE).await;
    let v = shown(&b).await;
    assert_eq!(v["pending"], json!([]), "{v}");
    assert_eq!(v["credited"], json!(want_credited));
    assert_eq!(
        v["balance"],
        json!({"cash": {"credited": 650, "pending": 0, "total": 650},
               "coin": {"credited": 5, "pending": 0, "total": 5}})
    );
    let disabled = b
        .eval(
            "return document.getElementById('withdraw').disabled;",
            json!([]),
        )
        .await;
    assert_eq!(disabled, true);
    b.screenshot(&out.join("phone-credited.png")).await;
    b.resize(DESKTOP).await;
    let v = shown(&b).await;
    assert_eq!(v["overflow"], false);
    b.screenshot(&out.join("desktop-credited.png")).await;
    println!("screenshots: {}", out.display());

    // Still exactly once after the page's whole life.
    let acct = ledger.account("2001").await.unwrap();
    assert_eq!(acct.credited.len(), 5);
    assert_eq!(acct.double_credits, 0);
    drop(b);
    let report = r.shutdown().await;
    assert!(report.drained);
    let _ = std::fs::remove_dir_all(dir);
}

async fn call(
    r: &Running,
    method: reqwest::Method,
    path: &str,
    bearer: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new().request(method, format!("http://{}{path}", r.http_addr));
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_that_do_not_fit_get_401_with_stable_codes_and_the_page_says_why() {
    let tag = format!("ws{:08x}", rand::random::<u32>());
    let (r, codec, dir) = running(&tag, 10).await;
    let out = shots("sessions");
    let now = now_ms();
    let good = codec
        .mint("3001", "cny", Duration::from_secs(600), now)
        .unwrap();
    let expired = codec
        .mint("3001", "cny", Duration::from_secs(60), now - 120_000)
        .unwrap();
    let foreign = SessionCodec::new(KeyRing::random(2))
        .mint("3001", "cny", Duration::from_secs(600), now)
        .unwrap();
    let get = reqwest::Method::GET;
    let post = reqwest::Method::POST;
    let page_path = "/v1/users/3001/rewards?activity_id=cny";

    let (s, v) = call(&r, get.clone(), page_path, Some(&good), None).await;
    assert_eq!((s, v["user_id"].clone()), (200, json!("3001")), "{v}");
    for (bearer, path, code) in [
        (None, page_path, "unauthorized"),
        (Some("rws1"), page_path, "unauthorized"),
        (Some(expired.as_str()), page_path, "session_expired"),
        (Some(&tampered(&good)), page_path, "session_invalid"),
        (Some(&foreign), page_path, "session_invalid"),
        (
            Some(&good),
            "/v1/users/3002/rewards?activity_id=cny",
            "session_other_user",
        ),
        (
            Some(&good),
            "/v1/users/3001/rewards?activity_id=other",
            "session_other_activity",
        ),
    ] {
        let (s, v) = call(&r, get.clone(), path, bearer, None).await;
        assert_eq!((s, v["error"].as_str()), (401, Some(code)), "{path} {v}");
        // The reason never repeats what was presented.
        if let Some(t) = bearer {
            assert!(!v.to_string().contains(t), "{v}");
        }
    }
    // Bodies are held to the session too: withdraw and validate for someone else.
    for path in ["/v1/withdraw", "/v1/tokens/validate"] {
        let (s, v) = call(
            &r,
            post.clone(),
            path,
            Some(&good),
            Some(json!({"user_id": "3002", "activity_id": "cny", "tokens": []})),
        )
        .await;
        assert_eq!((s, v["error"].clone()), (401, json!("session_other_user")));
    }
    let (s, v) = call(
        &r,
        post.clone(),
        "/v1/users/3001/rewards",
        Some(&good),
        Some(json!({"activity_id": "other", "tokens": []})),
    )
    .await;
    assert_eq!(
        (s, v["error"].clone()),
        (401, json!("session_other_activity"))
    );
    // The backend credential still opens every user, and mints sessions; a session
    // cannot mint.
    let (s, v) = call(
        &r,
        get.clone(),
        "/v1/users/3002/rewards?activity_id=cny",
        Some(WALLET_CREDENTIAL),
        None,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let mint = json!({"user_id": "3002", "activity_id": "cny", "ttl_secs": 300});
    let (s, v) = call(
        &r,
        post.clone(),
        "/v1/sessions",
        Some(&good),
        Some(mint.clone()),
    )
    .await;
    assert_eq!((s, v["error"].clone()), (403, json!("forbidden")));
    let (s, v) = call(
        &r,
        post.clone(),
        "/v1/sessions",
        Some(WALLET_CREDENTIAL),
        Some(mint),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let minted = v["session"].as_str().unwrap().to_string();
    let (s, v) = call(&r, get.clone(), "/v1/session", Some(&minted), None).await;
    assert_eq!((s, v["user_id"].clone()), (200, json!("3002")), "{v}");
    let (s, v) = call(
        &r,
        post.clone(),
        "/v1/sessions",
        Some(WALLET_CREDENTIAL),
        Some(json!({"user_id": "3002", "activity_id": "cny", "ttl_secs": 999_999})),
    )
    .await;
    assert_eq!((s, v["error"].clone()), (400, json!("bad_request")));

    // CORS: the configured origin, exactly; any other gets nothing to read.
    let client = reqwest::Client::new();
    let url = format!("http://{}{page_path}", r.http_addr);
    let pre = |origin: &'static str| {
        client
            .request(reqwest::Method::OPTIONS, &url)
            .header("origin", origin)
            .header("access-control-request-method", "GET")
            .header("access-control-request-headers", "authorization")
            .send()
    };
    let resp = pre(ORIGIN).await.unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    assert_eq!(resp.headers()["access-control-allow-origin"], ORIGIN);
    assert_eq!(resp.headers()["vary"], "origin");
    assert!(
        resp.headers()["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .contains("authorization")
    );
    let resp = pre("https://evil.example.com").await.unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    assert!(resp.headers().get("access-control-allow-origin").is_none());
    let resp = client
        .get(&url)
        .header("origin", ORIGIN)
        .bearer_auth(&expired)
        .send()
        .await
        .unwrap();
    // A refusal is readable by the allowed origin's page (so it can say why).
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(resp.headers()["access-control-allow-origin"], ORIGIN);
    let resp = client
        .get(&url)
        .header("origin", "https://evil.example.com")
        .bearer_auth(&good)
        .send()
        .await
        .unwrap();
    assert!(resp.headers().get("access-control-allow-origin").is_none());

    // The page says why, in a browser: no session, expired, edited, a foreign key.
    let b = Browser::start(PHONE).await;
    let problem = "return !document.getElementById('problem').hidden;";
    b.open(&format!("http://{}/wallet/", r.http_addr)).await;
    b.wait_for("the no-session message", problem, PAGE).await;
    let v = shown(&b).await;
    assert_eq!(v["problem"], "unauthorized", "{v}");
    b.screenshot(&out.join("phone-no-session.png")).await;
    for (session, code) in [
        (expired.as_str(), "session_expired"),
        (&tampered(&good), "session_invalid"),
        (&foreign, "session_invalid"),
    ] {
        b.open("about:blank").await;
        b.open(&page_url(&r, session)).await;
        b.wait_for(
            "the refusal",
            &format!("return document.getElementById('problem').dataset.code === '{code}';"),
            PAGE,
        )
        .await;
        let v = shown(&b).await;
        assert_eq!(v["problem"], code, "{v}");
        let hidden = b
            .eval(
                "return document.getElementById('wallet').hidden && document.getElementById('retry').hidden;",
                json!([]),
            )
            .await;
        assert_eq!(hidden, true, "{code}: no wallet and no pointless retry");
        if code == "session_expired" {
            b.screenshot(&out.join("phone-expired.png")).await;
            b.resize(DESKTOP).await;
            b.screenshot(&out.join("desktop-expired.png")).await;
            b.resize(PHONE).await;
        }
    }
    // A wallet link opened over the page changes only the fragment: the page starts
    // over with the new session. First the store fails for this user (a wrong-typed
    // key where the token hash goes): 503, and the page offers a retry, which shows the
    // empty wallet once the key is gone. Then the service goes away: the page says it
    // cannot reach it.
    use fred::interfaces::{ClientLike as _, KeysInterface as _};
    let redis = reward_runtime::redis::builder(&common::redis_url(), Duration::from_secs(10))
        .unwrap()
        .build()
        .unwrap();
    redis.init().await.unwrap();
    let hash = r.service().sdk().store().key("3001", "cny");
    let _: () = redis
        .set(&hash, "not a hash", None, None, false)
        .await
        .unwrap();
    b.open(&page_url(&r, &good)).await;
    b.wait_for(
        "the error message",
        "return document.getElementById('problem').dataset.code === 'unavailable';",
        PAGE,
    )
    .await;
    let retry = b
        .eval(
            "return !document.getElementById('retry').hidden;",
            json!([]),
        )
        .await;
    assert_eq!(retry, true, "an error the user can retry shows the button");
    b.screenshot(&out.join("phone-error.png")).await;
    let _: i64 = redis.del(&hash).await.unwrap();
    b.click("#retry").await;
    b.wait_for("the empty wallet", READY, PAGE).await;
    let v = shown(&b).await;
    assert_eq!(v["empty"], true, "{v}");
    b.screenshot(&out.join("phone-empty.png")).await;
    // The device goes offline: the page says so instead of failing; back online, it
    // reloads by itself.
    b.set_offline(true).await;
    b.wait_for(
        "the offline signal",
        "return navigator.onLine === false;",
        PAGE,
    )
    .await;
    b.type_into("#code", &"B".repeat(40)).await;
    b.click("#add").await;
    b.wait_for(
        "the offline message",
        "return document.getElementById('problem').dataset.code === 'offline';",
        PAGE,
    )
    .await;
    b.screenshot(&out.join("phone-offline.png")).await;
    b.set_offline(false).await;
    b.wait_for("the reload once back online", READY, PAGE).await;
    let v = shown(&b).await;
    assert_eq!(v["problem"], Value::Null, "{v}");
    assert!(
        v["notes"]["unknown"].is_null() && v["notes"]["illegal"].as_str().is_some(),
        "{v}"
    );
    let report = r.shutdown().await;
    assert!(report.drained);
    // Something that is not a code is refused on the spot, and nothing is saved.
    b.type_into("#code", "not a code!").await;
    b.click("#add").await;
    let said = b
        .eval(
            "return [document.getElementById('status').textContent, localStorage.getItem('reward-wallet:cny:3001')];",
            json!([]),
        )
        .await;
    assert_eq!(
        said,
        json!([
            "That does not look like a reward code; nothing was saved.",
            // Only the code kept while offline.
            json!(["B".repeat(40)]).to_string()
        ])
    );
    b.eval("document.getElementById('code').value = '';", json!([]))
        .await;
    b.type_into("#code", &"A".repeat(40)).await;
    b.click("#add").await;
    b.wait_for("the unreachable message", problem, PAGE).await;
    let v = shown(&b).await;
    assert_eq!(v["problem"], "unreachable", "{v}");
    b.screenshot(&out.join("phone-unreachable.png")).await;
    println!("screenshots: {}", out.display());
    drop(b);
    let _ = std::fs::remove_dir_all(dir);
}
