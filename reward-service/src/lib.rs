//! The reward service: credits each trade number exactly once, within budget.
//!
//! Built so far: [`claim`], the atomic heart of a grant (idempotency record and budget
//! shard checked and changed by one Redis script); [`downstream`], the trait every
//! crediting system implements, with the built-in Redis ledger; [`grant`], one grant
//! end to end (claim, credit, finish, failure archive). Still to come (issue 4): the
//! HTTP downstream, token deletion after a credit, the failure topic, the gRPC and
//! wallet HTTP APIs, health, graceful shutdown.

pub mod claim;
pub mod downstream;
pub mod grant;

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
