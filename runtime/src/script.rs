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
//!
//! # Every reply proves whose it is
//! fred 10.1 follows a cluster's `ASK` redirection (a key in a slot that is moving to
//! another primary) by writing `ASKING` on its shared, pipelined connection to the
//! target and reading the next reply on that connection as `ASKING`'s answer. When
//! other calls are in flight there, that reply is theirs: each of them is then handed
//! the reply of the call behind it, and the last one `ASKING`'s `OK`, silently
//! (`runtime/examples/cluster_probe.rs` shows it: many callers on one client, every
//! reply the caller's own argument, through a reshard). A claim or a credit decided on
//! someone else's answer moves money wrongly, so no script's reply is taken on trust:
//! every script runs inside a wrapper that takes a tag (a number unique in this
//! process) as its last argument and answers `{tag, reply}`; a reply whose tag is not
//! the call's is refused as [`is_out_of_step`] (the call's outcome is unknown: it ran
//! or not, like a timeout) and counted in `reward_redis_replies_out_of_step_total`.
//! Reads that decide money go through a script too ([`HMGET_LUA`]). Errors come back
//! untagged (an error is never taken as a result). The cost: one more argument and a
//! two-element reply per call.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use fred::error::{Error, ErrorKind};
use fred::interfaces::ClientLike;
use fred::prelude::{Client, FromValue, LuaInterface, Value};
use fred::types::{ClusterHash, CustomCommand};

/// Whether `e` is Redis saying it does not know the script (nothing ran).
pub fn is_noscript(e: &fred::error::Error) -> bool {
    e.details().starts_with("NOSCRIPT")
}

/// The counter of replies refused because they were another call's.
pub const OUT_OF_STEP_METRIC: &str = "reward_redis_replies_out_of_step_total";

const OUT_OF_STEP: &str = "OUTOFSTEP";

/// Sends of one call redirected by a cluster (10, 30, 90 ms apart) before its error
/// goes to the caller: a `MOVED` has refreshed the slot map by the second; an `ASK`
/// lasts until the key's slot has moved.
const REDIRECTED_TRIES: u32 = 4;

/// Whether `e` is a reply refused because it answered another call (module doc): the
/// call's own outcome is unknown.
pub fn is_out_of_step(e: &Error) -> bool {
    e.details().starts_with(OUT_OF_STEP)
}

/// A script that reads fields of one hash (`KEYS[1]`, fields in `ARGV`), for reads
/// that decide money: loaded as a [`Script`], its reply is checked like any other.
pub const HMGET_LUA: &str = include_str!("lua/hmget.lua");

/// The wrapper every script runs in (`lua/tagged.lua`, the body in place of its
/// `--[[body]]` line): takes the tag off `ARGV`, runs the body, answers `{tag, reply}`;
/// an error reply goes back as it is.
const TAGGED_LUA: &str = include_str!("lua/tagged.lua");

/// `body` in its tagging wrapper ([`TAGGED_LUA`]).
fn wrapped(body: &str) -> String {
    let (head, tail) = TAGGED_LUA
        .split_once("--[[body]]")
        .unwrap_or((TAGGED_LUA, ""));
    format!("{head}{body}{tail}")
}

/// A tag no other call of this process is using.
fn next_tag() -> Value {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    Value::from(NEXT.fetch_add(1, Ordering::Relaxed).to_string())
}

/// The reply of a wrapped script when it carries `tag`; refused otherwise.
fn untag<R: FromValue>(tag: &Value, reply: Value) -> Result<R, Error> {
    let mut parts = match reply {
        Value::Array(parts) if !parts.is_empty() => parts.into_iter(),
        other => return Err(out_of_step(&other)),
    };
    let got = parts.next().unwrap_or(Value::Null);
    if got.as_str() != tag.as_str() {
        return Err(out_of_step(&got));
    }
    // A Lua nil or false leaves the array one element long.
    R::from_value(parts.next().unwrap_or(Value::Null))
}

fn out_of_step(got: &Value) -> Error {
    metrics::counter!(OUT_OF_STEP_METRIC).increment(1);
    let kind = match got {
        Value::Array(_) => "another call's reply",
        Value::String(_) | Value::Bytes(_) => "a string, not a tagged reply",
        Value::Null => "nothing",
        _ => "a reply of another shape",
    };
    Error::new(
        ErrorKind::Protocol,
        format!("{OUT_OF_STEP}: the connection answered {kind}; this call may or may not have run"),
    )
}

/// A Lua script loaded on Redis.
#[derive(Debug, Clone)]
pub struct Script {
    source: Arc<str>,
    sha: Arc<str>,
}

impl Script {
    /// Loads `body` in its tagging wrapper (`SCRIPT LOAD`; module doc) and remembers
    /// its SHA. In a cluster this loads one node; the others get the script at their
    /// first `NOSCRIPT` (module doc).
    pub async fn load(client: &Client, body: &str) -> Result<Self, fred::error::Error> {
        // Registered at 0, so a rate over it sees its first refusal.
        metrics::counter!(OUT_OF_STEP_METRIC).increment(0);
        let source: Arc<str> = wrapped(body).into();
        let sha: String = client.script_load(&*source).await?;
        Ok(Self {
            source,
            sha: sha.into(),
        })
    }

    /// The script's SHA1, as `EVALSHA` takes it.
    pub fn sha(&self) -> &str {
        &self.sha
    }

    /// The script's text as Redis runs it (in its wrapper: the last argument of a call
    /// is its tag, and the reply is `{tag, reply}`).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Runs the script with the keys and arguments `call` builds; after a `NOSCRIPT`
    /// reply, sends it once more with its body (`EVAL`); a call a cluster redirected
    /// (it did not run) is sent again up to 3 times. `call` runs once per send, so
    /// the usual single send makes no spare copy of its arguments.
    pub async fn eval<R: FromValue>(
        &self,
        client: &Client,
        call: impl Fn() -> (Vec<String>, Vec<Value>),
    ) -> Result<R, fred::error::Error> {
        let tag = next_tag();
        let tagged = || {
            let (keys, mut args) = call();
            args.push(tag.clone());
            (keys, args)
        };
        let mut pause = std::time::Duration::from_millis(10);
        for _ in 1..REDIRECTED_TRIES {
            match self.send(client, &tagged).await {
                // Redirected, not run (crate::redis): once more, on the refreshed map.
                Err(e) if crate::redis::is_redirected(&e) => {
                    tokio::time::sleep(pause).await;
                    pause *= 3;
                }
                other => return untag(&tag, other?),
            }
        }
        untag(&tag, self.send(client, &tagged).await?)
    }

    async fn send(
        &self,
        client: &Client,
        tagged: &impl Fn() -> (Vec<String>, Vec<Value>),
    ) -> Result<Value, Error> {
        let (keys, args) = tagged();
        match client.evalsha(self.sha(), keys, args).await {
            Err(e) if is_noscript(&e) => {
                let (keys, args) = tagged();
                client.eval(&*self.source, keys, args).await
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
        let tagged: Vec<(Value, Vec<Value>)> = calls
            .iter()
            .map(|call| {
                let tag = next_tag();
                let mut c = Vec::with_capacity(call.len() + 1);
                c.extend(call.iter().cloned());
                c.push(tag.clone());
                (tag, c)
            })
            .collect();
        let mut replies: Vec<Result<Value, Error>> =
            pipeline(client, "EVALSHA", self.sha(), tagged.iter().map(|(_, c)| c)).await;
        let lost: Vec<usize> = (0..replies.len())
            .filter(|&i| matches!(&replies[i], Err(e) if is_noscript(e)))
            .collect();
        if !lost.is_empty() {
            let again = pipeline(
                client,
                "EVAL",
                &self.source,
                lost.iter().map(|&i| &tagged[i].1),
            )
            .await;
            for (i, a) in lost.into_iter().zip(again) {
                replies[i] = a;
            }
        }
        replies
            .into_iter()
            .zip(&tagged)
            .map(|(r, (tag, _))| r.and_then(|v| untag(tag, v)))
            .collect()
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

    fn tagged(tag: &Value, reply: Vec<Value>) -> Value {
        let mut v = vec![tag.clone()];
        v.extend(reply);
        Value::Array(v)
    }

    #[test]
    fn a_reply_is_taken_only_with_its_own_tag() {
        let mine = next_tag();
        let other = next_tag();
        assert_ne!(mine, other);
        let ok: i64 = untag(&mine, tagged(&mine, vec![Value::from(7)])).unwrap();
        assert_eq!(ok, 7);
        let e = untag::<i64>(&mine, tagged(&other, vec![Value::from(7)])).unwrap_err();
        assert!(is_out_of_step(&e), "{e}");
        // What the last caller of a shifted run gets: ASKING's OK.
        let e = untag::<i64>(&mine, Value::from("OK")).unwrap_err();
        assert!(is_out_of_step(&e), "{e}");
        let e = untag::<i64>(&mine, Value::Null).unwrap_err();
        assert!(is_out_of_step(&e), "{e}");
        let e = untag::<i64>(&mine, Value::Array(vec![])).unwrap_err();
        assert!(is_out_of_step(&e), "{e}");
        // A Lua nil or false leaves only the tag.
        let none: Option<i64> = untag(&mine, tagged(&mine, vec![])).unwrap();
        assert_eq!(none, None);
        let rows: Vec<i64> = untag(
            &mine,
            tagged(&mine, vec![Value::Array(vec![1.into(), 2.into()])]),
        )
        .unwrap();
        assert_eq!(rows, vec![1, 2]);
    }

    #[test]
    fn the_wrapper_takes_the_tag_off_and_keeps_the_body_whole() {
        let w = wrapped("return {KEYS[1], ARGV[1]}");
        assert!(w.starts_with("local __tag = table.remove(ARGV)\n"), "{w}");
        assert!(w.contains("\nreturn {KEYS[1], ARGV[1]}\nend)()"), "{w}");
        assert!(w.ends_with("return {__tag, __r}\n"), "{w}");
    }

    #[test]
    fn the_wrapper_has_its_body_line() {
        assert_eq!(TAGGED_LUA.matches("--[[body]]").count(), 1);
        assert_eq!(
            wrapped("return 1"),
            "local __tag = table.remove(ARGV)\n\
             local __r = (function()\nreturn 1\nend)()\n\
             if type(__r) == 'table' and __r.err then return __r end\n\
             if type(__r) == 'table' and __r.ok then return {__tag, __r.ok} end\n\
             return {__tag, __r}\n"
        );
    }

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
