//! Lua scripts on Redis: called by SHA, sent with their body where a node forgot them.
//!
//! Every atomic step of the pipeline (a token write, a claim, a ledger credit, a
//! token move, a delay-queue claim) is one Lua script, so a step either happens whole
//! or not at all, whatever the connection does. A [`Script`] is loaded with `SCRIPT
//! LOAD` at start-up and called with `EVALSHA` (the body is not resent per call). A
//! Redis that restarted or ran `SCRIPT FLUSH` answers `NOSCRIPT`; the script is then
//! sent once more as `EVAL` with its body, which runs it and puts it back in that
//! node's script cache. That resend is safe because a `NOSCRIPT` reply means the
//! script did not run.
//!
//! # On a Redis Cluster
//! Each primary keeps its own script cache, and a replica promoted by a failover starts
//! with an empty one. So the body goes with the call wherever a node says `NOSCRIPT`:
//! the call is routed by its first key like the `EVALSHA` was, so it lands on the node
//! that forgot, and every later `EVALSHA` there finds the script. `SCRIPT LOAD` at
//! start-up only learns the SHA (any node answers the same one); no node needs to be
//! loaded ahead, and a reshard or failover needs no reload pass.
//!
//! [`Script::eval_pipeline`] sends many calls in one pipeline (one write and one read
//! on the connection); in a cluster each call is routed by its first key.

use std::sync::Arc;

use fred::interfaces::ClientLike;
use fred::prelude::{Client, FromValue, LuaInterface, Value};
use fred::types::{ClusterHash, CustomCommand};

/// Whether `e` is Redis saying it does not know the script (nothing ran).
pub fn is_noscript(e: &fred::error::Error) -> bool {
    e.details().starts_with("NOSCRIPT")
}

/// A Lua script loaded on Redis.
#[derive(Debug, Clone)]
pub struct Script {
    source: &'static str,
    sha: Arc<str>,
}

impl Script {
    /// Loads `source` (`SCRIPT LOAD`) and remembers its SHA. In a cluster this loads
    /// one node; the others get the body at their first `NOSCRIPT` (module doc).
    pub async fn load(client: &Client, source: &'static str) -> Result<Self, fred::error::Error> {
        let sha: String = client.script_load(source).await?;
        Ok(Self {
            source,
            sha: sha.into(),
        })
    }

    /// The script's SHA1, as `EVALSHA` takes it.
    pub fn sha(&self) -> &str {
        &self.sha
    }

    /// The script's text.
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// Runs the script with the keys and arguments `call` builds; after a `NOSCRIPT`
    /// reply, sends it once more with its body (`EVAL`). `call` runs once per send, so
    /// the usual single send makes no spare copy of its arguments.
    pub async fn eval<R: FromValue>(
        &self,
        client: &Client,
        call: impl Fn() -> (Vec<String>, Vec<Value>),
    ) -> Result<R, fred::error::Error> {
        let (keys, args) = call();
        match client.evalsha(self.sha(), keys, args).await {
            Err(e) if is_noscript(&e) => {
                let (keys, args) = call();
                client.eval(self.source, keys, args).await
            }
            other => other,
        }
    }

    /// Sends one `EVALSHA` per call, all in one pipeline, and answers each call's
    /// reply in order. Each call is `numkeys, keys..., args...`. Calls answered
    /// `NOSCRIPT` are sent again with the body (`EVAL`, in one more pipeline). A
    /// connection-level failure answers every call with that error.
    pub async fn eval_pipeline<R: FromValue>(
        &self,
        client: &Client,
        calls: &[Vec<Value>],
    ) -> Vec<Result<R, fred::error::Error>> {
        let mut replies = pipeline(client, "EVALSHA", self.sha(), calls.iter()).await;
        let lost: Vec<usize> = (0..replies.len())
            .filter(|&i| matches!(&replies[i], Err(e) if is_noscript(e)))
            .collect();
        if lost.is_empty() {
            return replies;
        }
        let again = pipeline(client, "EVAL", self.source, lost.iter().map(|&i| &calls[i])).await;
        for (i, a) in lost.into_iter().zip(again) {
            replies[i] = a;
        }
        replies
    }
}

/// Where a call (`numkeys, keys..., args...`) goes in a cluster: its first key's slot,
/// or any node for a call without keys.
fn call_slot(call: &[Value]) -> ClusterHash {
    match (call.first().and_then(Value::as_i64), call.get(1)) {
        (Some(n), Some(key)) if n > 0 => match key.as_bytes() {
            Some(bytes) => ClusterHash::Custom(fred::util::redis_keyslot(bytes)),
            None => ClusterHash::Random,
        },
        _ => ClusterHash::Random,
    }
}

async fn pipeline<'a, R: FromValue>(
    client: &Client,
    command: &'static str,
    script: &str,
    calls: impl ExactSizeIterator<Item = &'a Vec<Value>>,
) -> Vec<Result<R, fred::error::Error>> {
    let n = calls.len();
    let every = |e: fred::error::Error| (0..n).map(|_| Err(e.clone())).collect();
    let pipe = client.pipeline();
    for call in calls {
        let mut args = Vec::with_capacity(call.len() + 1);
        args.push(Value::from(script));
        args.extend(call.iter().cloned());
        // fred's pipelines have no Lua interface, so EVALSHA/EVAL go as custom commands.
        // In a cluster each must go to its first key's primary, and fred honours only a
        // slot given outright for a custom command (its other hashers fall back to the
        // first string argument, here the SHA, which sent every call to one node: a
        // MOVED and a full slot-map refetch for two calls in three on 3 primaries).
        let queued: Result<(), _> = pipe
            .custom(
                CustomCommand::new_static(command, call_slot(call), false),
                args,
            )
            .await;
        if let Err(e) = queued {
            // Nothing was sent yet: every call gets the error.
            return every(e);
        }
    }
    let results = pipe.try_all::<R>().await;
    if results.len() == n {
        results
    } else {
        // A connection-level failure answers once for the whole pipeline.
        let e = results
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| {
                fred::error::Error::new(
                    fred::error::ErrorKind::Protocol,
                    "pipeline answered a different number of replies",
                )
            });
        every(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_goes_to_its_first_keys_slot() {
        let call = vec![
            Value::from(2),
            Value::from("{user:7}:ledger"),
            Value::from("other"),
            Value::from("arg"),
        ];
        let slot = fred::util::redis_keyslot(b"{user:7}:ledger");
        assert_eq!(slot, fred::util::redis_keyslot(b"user:7"));
        assert!(matches!(call_slot(&call), ClusterHash::Custom(s) if s == slot));
        assert!(matches!(
            call_slot(&[Value::from(0), Value::from("arg")]),
            ClusterHash::Random
        ));
        assert!(matches!(call_slot(&[]), ClusterHash::Random));
    }
}
