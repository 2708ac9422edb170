//! Shared set-up for the SDK's tests against the local stack (`ops/stack up`).
//! This file only names the parts; each lives in the file of its role.
#![allow(dead_code)]

mod setup;

#[allow(unused_imports)] // each test file uses its own part of the kit
pub use self::setup::{config, started, topics};
#[allow(unused_imports)] // each test file uses its own part of the kit
pub use reward_testkit::{StackEnv as Stack, stack, temp_dir, unique};
