//! Redis of the local stack works for real (needs `ops/stack up`; fails, never skips).

use reward_bench::smoke::{SmokeError, redis};
use reward_stack::env::{Server, StackEnv, StackError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_hset_of_10k_fields_reads_back_exactly() {
    let report = redis::probe(&StackEnv::from_env(), 10_000)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.written, 10_000);
    assert_eq!(report.read_back, 10_000);
    assert_eq!(report.duplicates, 0);
}

#[tokio::test]
async fn a_dead_redis_fails_naming_the_start_command() {
    let env = StackEnv {
        redis_url: "redis://127.0.0.1:1".into(),
        ..StackEnv::from_env()
    };
    let err = redis::probe(&env, 10).await.unwrap_err();
    assert!(
        matches!(
            err,
            SmokeError::Stack(StackError::Unreachable {
                server: Server::Redis,
                ..
            })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("ops/stack up"), "{err}");
}

#[tokio::test]
async fn the_fork_watch_reads_the_stacks_redis_and_not_a_dead_one() {
    // The stack's Redis answers INFO stats: the watch reports a count (no fork is
    // forced here: a rewrite of the stack's AOF takes seconds and would slow every
    // other test), and the count is small across an instant.
    let watch = reward_stack::env::ForkWatch::start(&StackEnv::from_env().redis_url).await;
    let forks = watch.since_start().await;
    assert!(matches!(forks, Some(n) if n <= 1), "{forks:?}");
    // A Redis that cannot be asked gives None, which the benches print as a note.
    let dead = reward_stack::env::ForkWatch::start("redis://127.0.0.1:1").await;
    assert_eq!(dead.since_start().await, None);
}
