//! Shared set-up for the reward service's tests against the local stack's Redis.
//! This file only names the parts; each lives in the file of its role.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

mod files;
mod grants;
mod service;
mod tokens;

#[allow(unused_imports)] // each test file uses its own part of the kit
pub use self::{
    files::{unique_dir, workspace_bin},
    grants::{after_hold, claims, grant},
    service::{create_topics, service_config, service_env, service_toml, stack},
    tokens::tampered,
};
#[allow(unused_imports)] // each test file uses its own part of the kit
pub use reward_testkit::{CREDENTIAL, WALLET_CREDENTIAL, redis_url};
