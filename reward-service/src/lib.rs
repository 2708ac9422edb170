//! The reward service: credits each trade number exactly once, within budget.
//!
//! - [`claim`]: the atomic heart of a grant: idempotency record and budget shard,
//!   checked and changed by one Redis script; the exact guarantee is stated there.
//! - [`downstream`]: the trait every crediting system implements; the built-in Redis
//!   ledger and the HTTP downstream; errors classified by code.
//! - [`grant`]: one grant end to end (claim, credit, finish; failure archive and topic).
//! - [`tokens`]: moving a credited reward's token out of the user's pending hash.
//! - [`service`]: sync, async and batch grants; the wallet's token checks.
//! - [`grpc`], [`http`]: the two APIs; [`server`]: start-up and graceful shutdown;
//!   [`config`]: the TOML configuration and the bearer credential.

pub mod claim;
pub mod config;
pub mod downstream;
pub mod grant;
pub mod grpc;
pub mod http;
pub mod server;
pub mod service;
pub mod tokens;

use fred::prelude::{Client, FromValue, LuaInterface, Value};

/// Runs a loaded Lua script by its SHA; when Redis answers `NOSCRIPT` (a restart lost
/// its script cache) it loads `script` again and sends once more. `call` builds the
/// keys and arguments, so the usual single send makes no spare copy of them.
pub(crate) async fn eval_loaded<R: FromValue>(
    client: &Client,
    sha: &str,
    script: &str,
    call: impl Fn() -> (Vec<String>, Vec<Value>),
) -> Result<R, fred::error::Error> {
    let (keys, args) = call();
    match client.evalsha(sha, keys, args).await {
        Err(e) if e.details().starts_with("NOSCRIPT") => {
            let _: String = client.script_load(script).await?;
            let (keys, args) = call();
            client.evalsha(sha, keys, args).await
        }
        other => other,
    }
}
