//! A token's life (`sdk::store::life`) as a model test against the stack's Redis: random
//! interleavings of writes (first, retried, late), credits by the event path, and sweeps
//! over a few trade numbers, run through the real scripts (the SDK's write, the
//! service's move). After every step: a credited reward is never listed pending, a
//! stored reward that is not credited is, and nothing is credited twice by the sweeper,
//! which credits what it finds pending (the claim store is what stops the event path
//! from crediting twice; a late write that listed a credited reward again would make the
//! sweeper credit it once more, and this would see it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use fred::prelude::*;
use proptest::prelude::*;
use reward_runtime::script::Script;
use sdk::config::{StoreConfig, WriteMode};
use sdk::store::TokenStore;
use sdk::store::life::{Field, MOVE_MANY_LUA};

const ACTIVITY: &str = "act";
const USERS: [&str; 2] = ["ua", "ub"];
const TRADES: usize = 3;

#[derive(Debug, Clone, Copy)]
enum Op {
    /// The SDK writes trade `t` (a first write, a retry, or one landing late).
    Write(usize),
    /// The event path credits `t` (once: the claim store answers a repeat DUPLICATE),
    /// then moves its token.
    Credit(usize),
    /// A sweep: every due entry whose token is pending is credited and moved; an entry
    /// whose reward is credited (token or mark) ends.
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..TRADES).prop_map(Op::Write),
        (0..TRADES).prop_map(Op::Credit),
        Just(Op::Sweep),
    ]
}

/// The trade number `t` belongs to user `t % 2`.
fn user(t: usize) -> &'static str {
    USERS[t % USERS.len()]
}

fn trade(t: usize) -> String {
    format!("t{t}")
}

struct World {
    store: TokenStore,
    client: Client,
    mover: Script,
    /// What the model says: credited trade numbers, credits per trade number, and
    /// the ones written at least once.
    credited: BTreeMap<usize, bool>,
    credits: BTreeMap<usize, u32>,
    written: BTreeMap<usize, bool>,
}

impl World {
    async fn new() -> World {
        let cfg = StoreConfig {
            redis_url: common::stack().redis_url,
            key_prefix: common::unique("life"),
            write_mode: WriteMode::Direct,
            due_shards: 4,
            timeout_ms: 10_000,
            ..StoreConfig::default()
        };
        let store = TokenStore::connect(cfg).await.unwrap();
        let client = store.pool().next().clone();
        let mover = Script::load(&client, MOVE_MANY_LUA).await.unwrap();
        World {
            store,
            client,
            mover,
            credited: BTreeMap::new(),
            credits: BTreeMap::new(),
            written: BTreeMap::new(),
        }
    }

    /// The service's move of one credited token (and its due entry's removal).
    async fn move_token(&self, t: usize) {
        let (u, tr) = (user(t), trade(t));
        let hash = self.store.key(u, ACTIVITY);
        let _: Vec<i64> = self
            .mover
            .eval(&self.client, || {
                (
                    vec![hash.clone()],
                    vec![Value::from(3600), Value::from(tr.as_str())],
                )
            })
            .await
            .unwrap();
        let _: i64 = self
            .client
            .zrem(
                self.store.due_key(self.store.due_shard(u)),
                self.store.due_member(u, ACTIVITY, &tr),
            )
            .await
            .unwrap();
    }

    fn credit(&mut self, t: usize) {
        *self.credits.entry(t).or_default() += 1;
        self.credited.insert(t, true);
    }

    async fn apply(&mut self, op: Op) {
        match op {
            Op::Write(t) => {
                let (u, tr) = (user(t), trade(t));
                self.store
                    .put(u, ACTIVITY, &tr, &format!("sealed-{tr}"))
                    .await
                    .unwrap();
                self.written.insert(t, true);
            }
            Op::Credit(t) => {
                if !self.credited.get(&t).copied().unwrap_or(false) {
                    self.credit(t);
                }
                self.move_token(t).await;
            }
            Op::Sweep => {
                for shard in 0..self.store.due_shards() {
                    let key = self.store.due_key(shard);
                    let members: Vec<String> = self
                        .client
                        .zrange(&key, 0, -1, None, false, None, false)
                        .await
                        .unwrap();
                    for m in members {
                        let (u, _, tr) = sdk::store::parse_due_member(&m).unwrap();
                        let t: usize = tr[1..].parse().unwrap();
                        let held: Option<String> = self
                            .client
                            .hget(self.store.key(u, ACTIVITY), tr)
                            .await
                            .unwrap();
                        let field = held.as_deref().map(Field::of);
                        if matches!(field, Some(Field::Pending(_))) {
                            // The sweeper grants what it finds pending.
                            self.credit(t);
                            self.move_token(t).await;
                        } else if field.is_some() {
                            let _: i64 = self.client.zrem(&key, m.as_str()).await.unwrap();
                        }
                    }
                }
            }
        }
    }

    /// The promises, after every step.
    async fn check(&self, step: usize, ops: &[Op]) {
        for t in 0..TRADES {
            let (u, tr) = (user(t), trade(t));
            let held: Option<String> = self
                .client
                .hget(self.store.key(u, ACTIVITY), &tr)
                .await
                .unwrap();
            let field = held.as_deref().map(Field::of);
            let pending = matches!(field, Some(Field::Pending(_)));
            let credited = self.credited.get(&t).copied().unwrap_or(false);
            let written = self.written.get(&t).copied().unwrap_or(false);
            let sealed = format!("sealed-{tr}");
            if credited && written {
                assert_eq!(
                    field,
                    Some(Field::Credited(sealed.as_str())),
                    "step {step}: credited and written {tr} does not hold its token credited after {ops:?}"
                );
            }
            assert!(
                !(credited && pending),
                "step {step}: credited {tr} listed pending after {ops:?}"
            );
            assert!(
                credited || !written || pending,
                "step {step}: stored, uncredited {tr} not listed pending after {ops:?}"
            );
            assert!(
                self.credits.get(&t).copied().unwrap_or(0) <= 1,
                "step {step}: {tr} credited twice after {ops:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_credited_reward_is_never_listed_pending_nor_credited_twice(
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let mut w = World::new().await;
            for (i, op) in ops.iter().enumerate() {
                w.apply(*op).await;
                w.check(i, &ops[..=i]).await;
            }
        });
    }
}

/// One write of the differential test: user, trade number, token.
type Put = (usize, usize, usize);

/// Runs `puts` on a fresh prefix with `marks` (user, trade) credited before any write,
/// either one call per write ([`indexed_write_lua`]) or all in one call
/// ([`INDEXED_WRITE_MANY_LUA`]); answers the replies and what Redis holds after.
async fn run_puts(
    client: &Client,
    puts: &[Put],
    marks: &[(usize, usize)],
    cap: i64,
    together: bool,
) -> (
    Vec<i64>,
    Vec<BTreeMap<String, String>>,
    Vec<Vec<(String, f64)>>,
) {
    use sdk::store::life::{INDEXED_WRITE_MANY_LUA, indexed_write_lua};
    let prefix = common::unique("together");
    let hash = |u: usize| format!("{prefix}:h:{u}");
    let due = |u: usize| format!("{prefix}:due:{}", u % 2);
    for &(u, t) in marks {
        let _: () = client.hset(hash(u), (trade(t), "!")).await.unwrap();
        // A mark comes with its hash's TTL (the move gives it one).
        let _: () = client.expire(hash(u), 600, None).await.unwrap();
    }
    let field = |p: &Put| trade(p.1);
    let value = |p: &Put| format!("sealed{}", p.2);
    let member = |p: &Put| format!("{}|act|{}", p.0, trade(p.1));
    let replies: Vec<i64> = if together {
        let mut keys: Vec<String> = puts.iter().map(|p| hash(p.0)).collect();
        keys.extend(puts.iter().map(|p| due(p.0)));
        let mut args: Vec<Value> = vec![Value::from(cap), Value::from(600)];
        for p in puts {
            args.push(Value::from(field(p)));
            args.push(Value::from(value(p)));
        }
        for (i, p) in puts.iter().enumerate() {
            args.push(Value::from(i as f64));
            args.push(Value::from(member(p)));
        }
        client
            .eval(INDEXED_WRITE_MANY_LUA, keys, args)
            .await
            .unwrap()
    } else {
        let one = indexed_write_lua();
        let mut out = Vec::new();
        for (i, p) in puts.iter().enumerate() {
            let r: i64 = client
                .eval(
                    one.as_str(),
                    vec![hash(p.0), due(p.0)],
                    vec![
                        Value::from(field(p)),
                        Value::from(value(p)),
                        Value::from(cap),
                        Value::from(600),
                        Value::from(i as f64),
                        Value::from(member(p)),
                    ],
                )
                .await
                .unwrap();
            out.push(r);
        }
        out
    };
    let mut hashes = Vec::new();
    let mut dues = Vec::new();
    for u in 0..USERS.len() {
        let h: BTreeMap<String, String> = client.hgetall(hash(u)).await.unwrap();
        let ttl: i64 = client.ttl(hash(u)).await.unwrap();
        assert!(
            h.is_empty() || ttl > 0,
            "a hash without its TTL: {h:?} {ttl}"
        );
        hashes.push(h);
        let d: Vec<(String, f64)> = client
            .zrange(due(u), 0, -1, None, false, None, true)
            .await
            .unwrap();
        dues.push(d);
        let _: () = client.del(vec![hash(u), due(u)]).await.unwrap();
    }
    (replies, hashes, dues)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// Writes sent together in one call (direct writes that waited for a call slot,
    /// `sdk::store::combine`) are decided exactly as one call each, in order: the same
    /// answers (stored, capped, credited already), the same hashes, the same due
    /// entries, whatever the mix of repeats, caps and credits that came first.
    #[test]
    fn writes_sent_together_are_decided_as_one_by_one(
        puts in proptest::collection::vec((0..USERS.len(), 0..5usize, 0..2usize), 1..30),
        marks in proptest::collection::vec((0..USERS.len(), 0..5usize), 0..4),
        cap in 1..5i64,
    ) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let client = Builder::from_config(Config::from_url(&common::stack().redis_url).unwrap())
                .build()
                .unwrap();
            client.init().await.unwrap();
            let alone = run_puts(&client, &puts, &marks, cap, false).await;
            let together = run_puts(&client, &puts, &marks, cap, true).await;
            assert_eq!(alone, together, "{puts:?} marks {marks:?} cap {cap}");
        });
    }
}
