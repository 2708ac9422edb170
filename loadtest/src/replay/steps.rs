//! A replay from start to end, step by step: play the schedule, drain, stop the parts,
//! reconcile, report.

use std::path::PathBuf;

use reward_stack::env::StackEnv;

use super::run::Run;
use super::{ReplayOptions, ReplayReport};

/// Runs one replay; returns its run directory and report (reconciliation included).
pub async fn run(env: &StackEnv, opts: &ReplayOptions) -> anyhow::Result<(PathBuf, ReplayReport)> {
    let mut run = Run::start(env, opts).await?;
    let collector = run.start_collector();
    let watchers = run.start_watchers();
    let collected = run.play_schedule(collector).await?;
    run.drain(&collected).await?;
    run.measure_cost().await;
    let watched = watchers.stop().await;
    let consumers = run.stop_services().await?;
    let sdk_counters = run.close_sdk().await?;
    let (reconciliation, ceilings) = run.reconcile().await?;
    let stages = match opts.stages {
        Some(n) => match crate::stages::measure_timed(&env.redis_url, n).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("replay: the stage probe failed: {e:#}");
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    let mut report = run.report(
        &collected,
        watched,
        consumers,
        sdk_counters,
        reconciliation,
        ceilings,
    );
    if let Some(cost) = report.cost.as_mut() {
        cost.stages = stages;
    }
    // The run is over: its keys may be cleaned from now on (`loadtest clean`).
    run.end_live().await;
    Ok((run.dir, report))
}
