//! RocketMQ of the local stack works for real (needs `ops/stack up`; fails, never skips).

use reward_bench::smoke::SmokeError;
use reward_bench::smoke::rocketmq::{self, ProbeOptions};
use reward_stack::env::{Server, StackEnv, StackError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_send_10k_and_consume_every_one() {
    let report = rocketmq::probe(&StackEnv::from_env(), &ProbeOptions::new(10_000))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.written, 10_000);
    assert_eq!(report.read_back, 10_000, "every message consumed");
}

#[tokio::test]
async fn a_dead_name_server_fails_naming_the_start_command() {
    let env = StackEnv {
        rocketmq_namesrv: "127.0.0.1:1".into(),
        ..StackEnv::from_env()
    };
    let err = rocketmq::probe(&env, &ProbeOptions::new(10))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            SmokeError::Stack(StackError::Unreachable {
                server: Server::RocketMqNameServer,
                ..
            })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("ops/stack up"), "{err}");
}
