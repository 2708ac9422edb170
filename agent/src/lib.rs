//! The reward agent: the SDK behind a gRPC service (`reward.v1.RewardAgent`), one per
//! host, for activity services written in any language.
//!
//! # Why an agent, not a library per language
//! The SDK's promises are not formats: a token stored before the call answers, events
//! never lost (a spool, failover between two brokers, back-pressure), key rotation.
//! Written again in Java, Go, Python and TypeScript they would be four more copies of
//! money logic with nothing to keep them equal. An in-process core behind a C ABI would
//! bring its own pains into every caller (fork safety, async bridging into the JVM and
//! the GIL, a build per platform). So the one SDK runs in a process of its own on each
//! host, and the clients (`clients/`) are thin: generated stubs, a request builder, the
//! scene helpers, typed refusals, resends with the same trade number.
//!
//! # What a call promises
//! Exactly what [`sdk::Sdk::send_reward`] promises, stated in
//! `proto/proto/reward/v1/agent.proto` (rendered in `docs/api.md`): a reward answered
//! `issued` is durable in the token store, a broker or the agent's spool, and is
//! credited exactly once. A call whose answer is lost (a deadline, the agent killed)
//! is in doubt and is resent with the same trade number: the resend is answered like
//! any call, and the trade number is credited once whichever copy arrives first.
//! Refusals travel in the reply, typed ([`refusal`]), so a client classifies them
//! without parsing a message; gRPC statuses are left to the call itself.
//!
//! # Where it listens
//! A Unix socket by default ([`listen`]): the socket file's mode and group are the
//! credential, and a host's processes reach it without a port or a secret. Loopback
//! TCP is optional and needs a bearer credential (`REWARD_AGENT_TOKEN` or its file).
//! The token keys stay in the agent; callers only see sealed tokens.
//!
//! # Stopping
//! On SIGTERM the agent refuses new rewards (`CLOSING`), lets calls in flight finish,
//! then closes the SDK: the queue drains to a broker or the spool and the spool is
//! closed, all within `[drain] timeout_ms` ([`run`]).

pub mod client;
pub mod config;
pub mod listen;
pub mod refusal;
pub mod run;
pub mod service;

pub use config::AgentConfig;
pub use run::{Running, start};
