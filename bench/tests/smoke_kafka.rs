//! The Kafka-protocol broker of the local stack works for real (needs `ops/stack up`;
//! fails, never skips).

use reward_bench::smoke::SmokeError;
use reward_bench::smoke::kafka::{self, COMMIT_EVERY};
use reward_stack::env::{Server, StackEnv, StackError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_consumer_restart_resumes_from_committed_offset_without_loss() {
    // The probe itself checks that the second member starts, on every partition,
    // exactly at the offset the first one committed.
    let report = kafka::probe(&StackEnv::from_env(), 10_000)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.written, 10_000);
    assert_eq!(report.read_back, 10_000, "every message consumed");
    assert!(
        report.duplicates <= COMMIT_EVERY,
        "at most one commit interval is redelivered, got {} duplicates",
        report.duplicates
    );
}

#[tokio::test]
async fn a_dead_broker_fails_naming_the_start_command() {
    let env = StackEnv {
        kafka_brokers: "127.0.0.1:1".into(),
        ..StackEnv::from_env()
    };
    let err = kafka::probe(&env, 10).await.unwrap_err();
    assert!(
        matches!(
            err,
            SmokeError::Stack(StackError::Unreachable {
                server: Server::Kafka,
                ..
            })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("ops/stack up"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_restart_against_librdkafkas_mock_cluster() {
    // The same probe against librdkafka's in-process mock cluster: tells the client's
    // own behaviour (commit, leave, resume, close) from the broker's.
    let mock = rdkafka::mocking::MockCluster::new(1).unwrap();
    let env = StackEnv {
        kafka_brokers: mock.bootstrap_servers(),
        ..StackEnv::from_env()
    };
    // The mock cluster has no CreateTopics API: the topic is made on the mock itself.
    mock.create_topic("mock-smoke", 3, 1).unwrap();
    let opts = kafka::KafkaProbeOptions {
        messages: 10_000,
        debug: None,
        topic: Some("mock-smoke".into()),
    };
    let report = kafka::probe_with(&env, &opts)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.written, 10_000);
    assert_eq!(report.read_back, 10_000, "every message consumed");
    assert!(report.duplicates <= COMMIT_EVERY, "{}", report.duplicates);
}
