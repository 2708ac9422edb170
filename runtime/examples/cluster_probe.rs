//! Probe: how a client built by `reward_runtime::redis::builder` behaves through a
//! reshard and a failover. Prints, per second, calls answered and errors by kind.
//!
//! cargo run --example cluster_probe -- URL client|pool:N SECS [PRELOAD]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::prelude::*;
use reward_runtime::script::Script;

// Answers its own argument, so a reply handed to the wrong caller shows.
const LUA: &str = include_str!("cluster_probe.lua");

#[derive(Default)]
struct Sec {
    ok: u64,
    err: BTreeMap<String, u64>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    let url = a.get(1).ok_or("url")?.clone();
    let mode = a.get(2).ok_or("mode")?.clone();
    let secs: u64 = a.get(3).ok_or("secs")?.parse()?;
    let preload: u64 = a.get(4).map(|s| s.parse()).transpose()?.unwrap_or(0);
    let timeout = Duration::from_secs(2);
    let clients: Vec<Client> = if let Some(n) = mode.strip_prefix("pool:") {
        let pool = reward_runtime::redis::builder(&url, timeout)?.build_pool(n.parse()?)?;
        pool.init().await?;
        pool.clients().to_vec()
    } else {
        let c = reward_runtime::redis::builder(&url, timeout)?.build()?;
        c.init().await?;
        vec![c]
    };
    let script = Script::load(&clients[0], LUA).await?;
    if preload > 0 {
        let t = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for w in 0..16u64 {
            let c = clients[(w as usize) % clients.len()].clone();
            set.spawn(async move {
                let mut i = w;
                while i < preload {
                    let _: Result<(), _> = c.hset(format!("probe:{{u{i}}}:h"), ("n", 0i64)).await;
                    i += 16;
                }
            });
        }
        while set.join_next().await.is_some() {}
        eprintln!("preloaded {preload} keys in {:?}", t.elapsed());
    }
    let stats: Arc<Mutex<BTreeMap<u64, Sec>>> = Arc::default();
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for w in 0..32usize {
        let c = clients[w % clients.len()].clone();
        let stats = stats.clone();
        let script = script.clone();
        set.spawn(async move {
            let mut i: u64 = w as u64 * 7919;
            while start.elapsed().as_secs() < secs {
                i = i
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407)
                    % 300_000;
                let key = format!("probe:{{u{i}}}:h");
                let tag = format!("w{w}-{i}-{}", start.elapsed().as_nanos());
                let r: Result<String, _> = script
                    .eval(&c, || (vec![key.clone()], vec![Value::from(tag.as_str())]))
                    .await;
                let s = start.elapsed().as_secs();
                let failed = {
                    let mut g = stats.lock().unwrap_or_else(|p| p.into_inner());
                    let e = g.entry(s).or_default();
                    match r {
                        Ok(got) if got == tag => {
                            e.ok += 1;
                            false
                        }
                        Ok(_) => {
                            *e.err
                                .entry("WRONG REPLY (another call's)".into())
                                .or_default() += 1;
                            true
                        }
                        Err(err) => {
                            let msg: String = format!("{:?}: {}", err.kind(), err.details())
                                .chars()
                                .take(70)
                                .collect();
                            *e.err.entry(msg).or_default() += 1;
                            true
                        }
                    }
                };
                if failed {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        });
    }
    let mut printed = 0;
    while start.elapsed().as_secs() < secs + 3 {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let now = start.elapsed().as_secs();
        let g = stats.lock().unwrap_or_else(|p| p.into_inner());
        while printed + 1 < now {
            if let Some(s) = g.get(&printed) {
                println!("{printed:4} ok {:6} err {:?}", s.ok, s.err);
            } else {
                println!("{printed:4} nothing");
            }
            printed += 1;
        }
    }
    while set.join_next().await.is_some() {}
    Ok(())
}
