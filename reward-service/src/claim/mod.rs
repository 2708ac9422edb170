#![doc = include_str!("README.md")]

mod batch;
mod budget;
mod checks;
mod config;
mod doubt;
mod error;
mod grant;
mod guard;
pub mod keys;
pub mod layout;
mod outcome;
mod record;
mod replicas;
mod scripts;
mod single;
mod store;

pub use self::batch::GRANTS_PER_CALL;
pub use self::budget::{BORROW_TRIES, BUDGET_HOLD_MS, HOLD_RETRY_MS, MOVE_RESULTS};
pub use self::checks::MAX_AMOUNT;
pub use self::config::{CLAIM_TIMEOUT, ClaimConfig, MAX_SHARDS};
pub use self::doubt::Doubt;
pub use self::error::ClaimError;
pub use self::grant::Grant;
pub use self::outcome::{Claim, Finish, Prior};
pub use self::record::{ClaimState, RECORD_FORMAT, Record};
pub use self::scripts::{CLAIM_LUA, FIELDS_LUA, pack_fields};
pub use self::store::Claims;
