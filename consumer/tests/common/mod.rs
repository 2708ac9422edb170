//! Shared set-up for the consumer's tests: the local stack (`ops/stack up`), a reward
//! service in-process, test downstreams over HTTP, topics and configs named by a tag.
//! This file only names the parts; each lives in the file of its role.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

mod config;
mod names;
mod produce;
mod rate;
mod readback;
mod service;
mod wait;

#[allow(unused_imports)] // each test file uses its own part of the kit
pub use self::{
    config::{consumer_config, consumer_text, sdk_section},
    names::{create_topics, dead_topic, dir, events_topic, failures_topic, special_topic, tag},
    produce::{produce, produce_to, produce_unsigned, producer, publish},
    rate::{Rate, one_at_a_time, rate},
    readback::{credited, dead_letters, ledger, redis},
    service::{Setup, service, service_with, setup, setup_with, test_downstream},
    wait::wait_for,
};
#[allow(unused_imports)] // each test file uses its own part of the kit
pub use reward_testkit::{CREDENTIAL, event, stack};
