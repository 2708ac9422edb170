//! The local stack as code sees it, for the tests' kit, the load tester and the
//! benches (the operators' tools are `reward_tools`):
//!
//! - [`env`]: where the stack's servers are (`ops/stack.ports`, the file `ops/stack`
//!   reads too, and the env lines `ops/stack env` prints), a fast reachability check,
//!   Redis fork watching, the SDK and queue sections a test or replay writes.
//! - [`topics`]: creating Kafka and RocketMQ topics; a Kafka group's committed offsets.
//! - [`cpu`]: CPU counters of a process, the machine and a Redis, read one way for
//!   every figure of CPU per reward.

pub mod cpu;
pub mod env;
pub mod topics;
