//! Fleet-wide rates: every consumer instance leases its permits from Redis.
//!
//! A rate in `[limits]` is a promise about a downstream (a coupon system that takes
//! 2 000 credits/s), so it must hold for the whole fleet, however many consumer
//! instances run. A limiter per process would multiply it by the instance count.
//!
//! # Leases
//! Redis keeps one token bucket per reward type and one for the global valve (hash
//! `{prefix}:t:{type}` / `{prefix}:g`, refilled at the configured rate from Redis's
//! own clock, so instances' clocks do not matter). Every `lease_ms` (100 ms) each
//! instance runs **one** script that, for every type at once:
//! - gives back the permits it holds beyond what it needs now (so no permit sits
//!   unused in an idle instance while a busy one waits),
//! - takes what it needs for the next two lease periods: two periods of the type's
//!   fleet rate while anything of that type was asked for, one period shared by the
//!   live instances while idle (a first message after a quiet spell rarely waits).
//!
//! Within the instance the leased permits are spent through the per-type `governor`
//! limiter of [`crate::limits`] (at the fleet rate and burst), which smooths each
//! lease over its period instead of spending it in one lump. The fleet's total is
//! the bucket's: at most the rate over time, plus one bucket (the configured burst,
//! or two lease periods of the rate if larger, so a lease is never cut short by a
//! burst smaller than one period).
//!
//! # Priority across the fleet
//! The global valve's script also records, per instance, the highest priority it has
//! waiting and how much it used (a field of `{prefix}:gd`, expiring after three lease
//! periods). An instance asking for a lower priority gets only what is left after the
//! other instances' recorded higher-priority demand: cash on one instance is served
//! before coupons on another, as it is within one instance.
//!
//! # Live instances and Redis failures
//! The same script stamps the instance in the sorted set `{prefix}:live` and answers
//! how many instances stamped within `live_ttl_ms`. When the script fails (Redis
//! unreachable, a timeout), the instance refills itself at `rate / live` with the
//! last count it saw, so a fleet cut off from Redis stays near the rate instead of
//! stopping or multiplying it; `reward_consumer_fleet_fallback` is 1 meanwhile.
//!
//! # In doubt
//! A lease whose answer is lost may have taken permits: they are lost to the fleet for
//! that period (the rate dips, it never rises). An instance killed with permits in
//! hand loses at most two lease periods of them. Neither moves money: a permit only
//! lets a credit be attempted, and the reward service keeps every credit single.
//!
//! All keys share the hash tag `{prefix}`, so the one script works on a Redis Cluster
//! (one slot, one primary: a few calls per instance per lease period).

use std::time::{Duration, Instant};

use fred::prelude::{Client, Pool, Value};
use reward_runtime::script::Script;
use serde::Deserialize;
use tokio::sync::watch;

use crate::limits::{Ask, Grant, Limits, Plan};

/// The lease script. KEYS: live set, global bucket, global demand, type buckets...
/// ARGV: instance, live ttl ms, lease ms, type count, per type (rate, cap, give,
/// want), then global (rate, cap, give, want, used), class count, priorities
/// (highest first). Answers: live count, per type granted, global granted.
const LEASE_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local ttl = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], now, id)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 10)
local live = redis.call('ZCARD', KEYS[1])

local function refill(key, rate, cap, give)
  local s = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(s[1])
  local at = tonumber(s[2])
  if tokens == nil or at == nil then
    tokens = 0
    at = now
  end
  if now > at then
    tokens = tokens + (now - at) * rate / 1000
    at = now
  end
  tokens = math.min(tokens + give, cap)
  return tokens, at
end

local function store(key, tokens, at)
  redis.call('HSET', key, 'tokens', string.format('%.6f', tokens), 'at', at)
  redis.call('PEXPIRE', key, 60000)
end

local out = {live}
local n = tonumber(ARGV[4])
local a = 5
for i = 1, n do
  local key = KEYS[3 + i]
  local tokens, at = refill(key, tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))
  local grant = math.max(0, math.floor(math.min(tonumber(ARGV[a + 3]), tokens)))
  store(key, tokens - grant, at)
  out[#out + 1] = grant
  a = a + 4
end

local gtokens, gat = refill(KEYS[2], tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))
local want = tonumber(ARGV[a + 3])
local used = tonumber(ARGV[a + 4])
local classes = tonumber(ARGV[a + 5])
a = a + 6
-- Other instances' recorded demand; this instance's own old fields go.
local others = {}
local d = redis.call('HGETALL', KEYS[3])
for j = 1, #d, 2 do
  local p, who = string.match(d[j], '^(%d+)|(.*)$')
  local w, exp = string.match(d[j + 1], '^([%d%.]+)|(%d+)$')
  if p == nil or w == nil or tonumber(exp) < now or who == id then
    redis.call('HDEL', KEYS[3], d[j])
  else
    others[#others + 1] = {tonumber(p), tonumber(w)}
  end
end
local granted = 0
for c = 1, classes do
  local prio = tonumber(ARGV[a + c - 1])
  local reserve = 0
  for _, o in ipairs(others) do
    if o[1] > prio then reserve = reserve + o[2] end
  end
  local g = math.max(0, math.floor(math.min(want - granted, gtokens - reserve)))
  gtokens = gtokens - g
  granted = granted + g
end
store(KEYS[2], gtokens, gat)
if classes > 0 then
  local top = tonumber(ARGV[a])
  local demand = math.min(want, 2 * used + 1)
  redis.call('HSET', KEYS[3], top .. '|' .. id, demand .. '|' .. (now + 3 * lease))
  redis.call('PEXPIRE', KEYS[3], 60000)
end
out[#out + 1] = granted
return out
";

/// The `[fleet]` section: where the instances of one fleet meet.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FleetConfig {
    /// Hash tag of the fleet's keys (`{prefix}:...`). Every consumer in front of the
    /// same downstreams must use the same one; no braces.
    pub key_prefix: String,
    /// How often an instance leases permits.
    pub lease_ms: u64,
    /// An instance that has not leased for this long no longer counts as live.
    pub live_ttl_ms: u64,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            key_prefix: "rc-fleet".into(),
            lease_ms: 100,
            live_ttl_ms: 2000,
        }
    }
}

impl FleetConfig {
    /// Why the section is unusable, if it is.
    pub fn problem(&self) -> Option<String> {
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Some("fleet.key_prefix must be set, without braces".into());
        }
        if !(10..=5000).contains(&self.lease_ms) {
            return Some("fleet.lease_ms must be in 10..=5000".into());
        }
        if self.live_ttl_ms < 3 * self.lease_ms {
            return Some("fleet.live_ttl_ms must be at least 3 x fleet.lease_ms".into());
        }
        None
    }

    fn key(&self, what: &str) -> String {
        format!("{{{}}}:{what}", self.key_prefix)
    }
}

/// The lease script, loaded.
#[derive(Debug, Clone)]
pub struct Leaser {
    script: Script,
    cfg: FleetConfig,
    instance: String,
}

impl Leaser {
    /// Loads the script (on every primary of a cluster).
    pub async fn load(
        client: &Client,
        cfg: FleetConfig,
        instance: String,
    ) -> Result<Self, fred::error::Error> {
        Ok(Leaser {
            script: Script::load(client, LEASE_LUA).await?,
            cfg,
            instance,
        })
    }

    /// Runs one lease.
    pub async fn lease(&self, client: &Client, plan: &Plan) -> Result<Grant, fred::error::Error> {
        let reply: Vec<i64> = self.script.eval(client, || self.call(plan)).await?;
        let bad = || {
            fred::error::Error::new(
                fred::error::ErrorKind::Parse,
                "lease script answered the wrong number of values",
            )
        };
        if reply.len() != plan.types.len() + 2 {
            return Err(bad());
        }
        Ok(Grant {
            live: u32::try_from(reply[0].max(1)).unwrap_or(u32::MAX),
            types: reply[1..=plan.types.len()].to_vec(),
            global: reply[plan.types.len() + 1],
        })
    }

    fn call(&self, plan: &Plan) -> (Vec<String>, Vec<Value>) {
        let mut keys = vec![self.cfg.key("live"), self.cfg.key("g"), self.cfg.key("gd")];
        let mut args: Vec<Value> = vec![
            self.instance.clone().into(),
            Value::from(i64::try_from(self.cfg.live_ttl_ms).unwrap_or(i64::MAX)),
            Value::from(i64::try_from(self.cfg.lease_ms).unwrap_or(i64::MAX)),
            Value::from(plan.types.len() as i64),
        ];
        let bucket = |args: &mut Vec<Value>, a: &Ask| {
            args.push(format!("{:.6}", a.rate).into());
            args.push(format!("{:.6}", a.cap).into());
            args.push(a.give.max(0).into());
            args.push(a.want.max(0).into());
        };
        for a in &plan.types {
            keys.push(self.cfg.key(&format!("t:{}", a.name)));
            bucket(&mut args, a);
        }
        bucket(&mut args, &plan.global);
        args.push(plan.global_used.max(0).into());
        args.push(Value::from(plan.classes.len() as i64));
        for p in &plan.classes {
            args.push(Value::from(i64::from(*p)));
        }
        (keys, args)
    }
}

/// A unique name for this instance: host, process, and a random part.
pub fn instance_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    format!(
        "{host}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// Leases permits for `limits` every `lease_ms` until `stop` turns true; before it
/// returns, everything still held is given back.
pub async fn run(leaser: Leaser, pool: Pool, limits: Limits, mut stop: watch::Receiver<bool>) {
    let period = Duration::from_millis(leaser.cfg.lease_ms);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut live = 1u32;
    let mut last = Instant::now();
    limits.lease_on();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        let elapsed = last.elapsed().clamp(period, Duration::from_secs(2));
        last = Instant::now();
        let plan = limits.lease_plan(period, live);
        // A lease slower than a period is as good as lost: the next one follows.
        let answer = tokio::time::timeout(
            period.max(Duration::from_millis(500)),
            leaser.lease(pool.next(), &plan),
        )
        .await;
        match answer {
            Ok(Ok(g)) => {
                live = g.live;
                limits.lease_granted(&plan, &g);
                metrics::gauge!("reward_consumer_fleet_live").set(f64::from(live));
                metrics::gauge!("reward_consumer_fleet_fallback").set(0.0);
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, live, "fleet lease failed; refilling at rate / live");
                limits.lease_fallback(&plan, elapsed, live);
                metrics::gauge!("reward_consumer_fleet_fallback").set(1.0);
            }
            Err(_) => {
                tracing::warn!(live, "fleet lease timed out; refilling at rate / live");
                limits.lease_fallback(&plan, elapsed, live);
                metrics::gauge!("reward_consumer_fleet_fallback").set(1.0);
            }
        }
    }
    // Leaving: hand back every permit held, and leave the live set quickly.
    let plan = limits.lease_release();
    let _ = tokio::time::timeout(period * 5, leaser.lease(pool.next(), &plan)).await;
    let _ = tokio::time::timeout(period * 5, async {
        let _: Result<i64, _> = fred::interfaces::SortedSetsInterface::zrem(
            pool.next(),
            leaser.cfg.key("live"),
            leaser.instance.clone(),
        )
        .await;
    })
    .await;
}
