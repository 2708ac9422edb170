//! A `send_reward` whose caller gives up while the token write is in flight (the
//! write may land): its event is still queued, so a stored token never lacks the
//! event that credits it. Its own test binary: it pauses the stack Redis's writes for
//! a moment, which would disturb tests running beside it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{stack, started, temp_dir, unique};
use fred::prelude::*;
use sdk::request::{RedEnvelopeRain, User};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_cancelled_mid_write_still_sends_its_event() {
    let s = stack();
    let tag = unique("cancel");
    let spool = temp_dir("spool-cancel");
    // Direct mode: the call waits for its write (deferred calls do not wait at all),
    // alone for 5 s before the event may answer it, so the call is still waiting
    // for the paused write when its caller gives up, however busy the machine.
    let sdk = started(
        &s,
        &tag,
        &spool,
        "write_mode = \"direct\"\nqueue_after_ms = 5000\nwrite_wait_ms = 30000",
        "",
    )
    .await;
    let activity = unique("act");
    let redis = Builder::from_config(Config::from_url(&s.redis_url).unwrap())
        .build()
        .unwrap();
    redis.init().await.unwrap();
    // Writes (scripts included) wait for 1.5 s: the token write is sent, then stalls.
    // On a Redis Cluster every primary is paused, wherever the user's slot lives.
    for node in reward_runtime::keyspace::nodes(&redis).await.unwrap() {
        let _: String = reward_runtime::keyspace::on_node(
            &redis,
            node.as_ref(),
            "CLIENT",
            vec!["PAUSE", "1500", "WRITE"],
        )
        .await
        .unwrap();
    }
    let req = RedEnvelopeRain::new(&activity, "cash").grab(&User::new("77"), 1, 5);
    let trade_no = req.trade_no.clone();
    let call = {
        let sdk = sdk.clone();
        tokio::spawn(async move { sdk.send_reward(req).await })
    };
    reward_testkit::eventually(
        Duration::from_secs(30),
        "the token write sent to the paused Redis",
        async || sdk.store().stats().direct_calls.load(Ordering::Relaxed) >= 1,
    )
    .await;
    // The caller gives up: the future is dropped mid-write.
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    // Once the pause ends, the write that was in flight lands.
    reward_testkit::eventually(
        Duration::from_secs(30),
        "the cancelled call's token stored",
        async || {
            let held = sdk.store().list("77", &activity).await.unwrap();
            if held.contains_key(&trade_no) {
                Ok(())
            } else {
                Err(format!("{held:?}"))
            }
        },
    )
    .await;
    let report = sdk.close(Duration::from_secs(30)).await;
    assert_eq!(report.stats.accepted, 1, "the event was queued: {report:?}");
    assert_eq!(
        report.stats.delivered + report.stats.spooled,
        1,
        "{report:?}"
    );
    assert_eq!(report.left, 0, "{report:?}");
    // The write that was in flight landed: the token and its event both exist.
    let held = sdk.store().list("77", &activity).await.unwrap();
    assert!(held.contains_key(&trade_no), "{held:?}");
    std::fs::remove_dir_all(&spool).ok();
}
