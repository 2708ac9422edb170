//! Redis probe: one pipelined round of HSETs into a fresh hash, then HGETALL.
//!
//! This is the token store's access pattern (a hash per activity+user, a field per
//! trade number), at a size well past the 500-tokens-per-user cap of fireworks.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fred::prelude::*;

use reward_baseline::unique_name;
use reward_stack::env::{Server, StackEnv, check_reachable};

use super::{ProbeReport, SmokeError};

/// Writes `fields` fields with one pipeline, reads them back with HGETALL and checks
/// every field and value. The hash is deleted afterwards (and expires anyway).
pub async fn probe(env: &StackEnv, fields: u64) -> Result<ProbeReport, SmokeError> {
    check_reachable(
        Server::Redis,
        &env.redis_host_port()?,
        Duration::from_secs(2),
    )
    .await?;
    let config = Config::from_url(&env.redis_url)?;
    let client = Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = Duration::from_secs(3);
        })
        .build()?;
    client.init().await?;
    let key = format!("{{{}}}:tokens", unique_name("smoke"));

    let start = Instant::now();
    let pipeline = client.pipeline();
    for i in 0..fields {
        // The queued command resolves when `all()` runs; nothing is sent yet.
        let () = pipeline
            .hset(&key, (format!("trade-{i}"), format!("token-{i}")))
            .await?;
    }
    let _: () = pipeline.expire(&key, 600, None).await?;
    let added: Vec<Value> = pipeline.all().await?;
    let write_time = start.elapsed();
    let new_fields: i64 = added
        .iter()
        .filter_map(Value::as_i64)
        .take(fields as usize)
        .sum();
    if new_fields != fields as i64 {
        return Err(SmokeError::Mismatch {
            server: Server::Redis,
            what: format!("HSET reported {new_fields} new fields, expected {fields}"),
        });
    }

    let start = Instant::now();
    let back: HashMap<String, String> = client.hgetall(&key).await?;
    let read_time = start.elapsed();
    let _: i64 = client.del(&key).await?;
    client.quit().await?;

    let wrong = (0..fields)
        .filter(|i| {
            back.get(&format!("trade-{i}")).map(String::as_str)
                != Some(format!("token-{i}").as_str())
        })
        .count();
    if back.len() as u64 != fields || wrong != 0 {
        return Err(SmokeError::Mismatch {
            server: Server::Redis,
            what: format!(
                "HGETALL returned {} fields ({wrong} missing or wrong), expected {fields}",
                back.len()
            ),
        });
    }
    Ok(ProbeReport {
        server: Server::Redis,
        written: fields,
        read_back: back.len() as u64,
        duplicates: 0,
        write_time,
        read_time,
        detail: "1 pipeline of HSETs, 1 HGETALL".into(),
    })
}
