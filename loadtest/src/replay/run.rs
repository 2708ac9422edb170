//! One replay as a run: what its phases share, and one method per phase, from
//! preparing the stack to assembling the report.

use super::links::Links;
use crate::faults::Link;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::reconcile::Reconciliation;
use crate::setup::{self, Setup};
use reward_runtime::clock::now_ms as unix_ms;
use reward_stack::env::{Server, StackEnv, check_reachable};

use super::assemble::{build_report, double_counters};
use super::children::{self, Services};
use super::collect::{self, Collected, CounterRow};
use super::hosts::{HostPool, Side};
use super::inject::{self, FaultLog, Targets};
use super::schedule::{Counters, Sample, SceneGen, progress_bar, schedule};
use super::{Ceilings, ReplayOptions, ReplayReport, drain};

/// What the phases of one replay share. Fields drop in declaration order: the SDK
/// before the children, before the double, before the setup.
pub(super) struct Run<'a> {
    /// When sending began (the schedule's time zero).
    start: Instant,
    /// The schedule's counters.
    counters: Arc<Counters>,
    /// The SDK every request goes through (in this process or in SDK hosts).
    sdk: Arc<Side>,
    /// The service and consumers (a fault may kill and restart a consumer).
    services: Arc<tokio::sync::Mutex<Services>>,
    /// The service's gRPC URL.
    grpc: String,
    /// The downstream double (runs with a downstream fault).
    double: Option<reward_standins::downstream::DownstreamDouble>,
    /// The fault proxies of the links the plan's network faults name.
    links: Arc<Links>,
    /// The run directory.
    pub(super) dir: PathBuf,
    /// The cost counters at the start of sending.
    probe: crate::cost::Probe,
    /// The cost from there to the end of the drain ([`Run::measure_cost`]).
    cost: Option<crate::cost::Cost>,
    /// Topics, key prefixes, configs and the manifest of the run.
    setup: Setup,
    /// The processes listed for the stack's Prometheus, while they run.
    published: Option<super::discovery::Published>,
    env: &'a StackEnv,
    opts: &'a ReplayOptions,
}

/// The collector of samples: the sending side (one clone per scene) and its task.
pub(super) struct Collector {
    samples: mpsc::UnboundedSender<Sample>,
    task: JoinHandle<anyhow::Result<Collected>>,
}

/// The tasks beside the schedule until the drain ends: the counter sampler and the
/// faults.
pub(super) struct Watchers {
    stop: Arc<tokio::sync::Notify>,
    sampler: JoinHandle<Vec<CounterRow>>,
    fault_log: FaultLog,
    faults: JoinHandle<()>,
}

/// What the watchers saw: the per-second counter samples and the faults injected
/// (by time).
pub(super) struct Watched {
    samples: Vec<CounterRow>,
    faults: Vec<super::recovery::Struck>,
}

impl Watchers {
    /// Waits for the faults to end, then stops the sampler.
    pub(super) async fn stop(self) -> Watched {
        let _ = self.faults.await;
        self.stop.notify_one();
        let samples = self.sampler.await.unwrap_or_default();
        let faults = self
            .fault_log
            .lock()
            .map(|l| {
                let mut l = l.clone();
                l.sort_by(|a, b| a.struck_secs.total_cmp(&b.struck_secs));
                l
            })
            .unwrap_or_default();
        Watched { samples, faults }
    }
}

impl<'a> Run<'a> {
    /// Prepares the run (stack reachable, run directory, topics and configs), starts
    /// the downstream double, the services and the SDK, waits for the stack's
    /// Prometheus (when there is one) to have scraped them all, then starts the cost
    /// probe and the clock.
    pub(super) async fn start(env: &'a StackEnv, opts: &'a ReplayOptions) -> anyhow::Result<Self> {
        let mut setup = Self::prepare(env, opts).await?;
        let dir = setup.dir.clone();
        eprintln!("replay: run directory {}", dir.display());
        let double = Self::start_double(opts, &setup).await?;
        let links = Links::start(env, &opts.faults, double.as_ref().map(|d| d.addr())).await?;
        let links = Arc::new(links);
        let (services, grpc) = children::start(env, &setup, opts, double.as_ref(), &links).await?;
        let services = Arc::new(tokio::sync::Mutex::new(services));
        let published = super::discovery::StackPrometheus::find().map(|p| {
            let run = dir
                .file_name()
                .map_or_else(|| "run".into(), |n| n.to_string_lossy().to_string());
            super::discovery::Published::start(&p, &run, services.clone(), opts.metrics_served)
        });
        let sdk = Arc::new(Self::start_sdk(env, opts, &setup, &links).await?);
        // Before the cost probe, so its window holds the run's traffic, not the wait.
        if let Some(p) = &published {
            p.scraped_before_traffic().await;
        }
        let probe = crate::cost::Probe::start(env, &children::procs(&*services.lock().await)).await;
        let start = Instant::now();
        setup.manifest.started_unix_ms = unix_ms();
        setup.manifest.save(&dir)?;
        let counters = Arc::new(Counters {
            max_in_flight: opts.max_in_flight,
            ..Counters::default()
        });
        Ok(Self {
            start,
            counters,
            sdk,
            services,
            grpc,
            double,
            links,
            dir,
            probe,
            cost: None,
            setup,
            published,
            env,
            opts,
        })
    }

    /// Ends the run's live mark (`reward_tools::clean::LiveRun`): nothing of the run
    /// writes to Redis any more.
    pub(super) async fn end_live(&self) {
        self.setup.live.end().await;
    }

    /// Checks that Redis, Kafka and the RocketMQ name server answer, then prepares
    /// the run directory, topics and configs.
    async fn prepare(env: &StackEnv, opts: &ReplayOptions) -> anyhow::Result<Setup> {
        let probe = Duration::from_secs(2);
        check_reachable(Server::Redis, &env.redis_host_port()?, probe).await?;
        check_reachable(Server::WalletRedis, &env.wallet_host_port()?, probe).await?;
        check_reachable(Server::Kafka, env.first_kafka_broker(), probe).await?;
        check_reachable(Server::RocketMqNameServer, &env.rocketmq_namesrv, probe).await?;
        let setup =
            setup::prepare(env, &opts.plan, &opts.out, &opts.limits, opts.partitions).await?;
        Ok(setup)
    }

    /// The SDK in this process, or `--sdk-hosts` SDK hosts (each with its config file
    /// in the run directory).
    async fn start_sdk(
        env: &StackEnv,
        opts: &ReplayOptions,
        setup: &Setup,
        links: &Links,
    ) -> anyhow::Result<Side> {
        let env = &links.env_for(env, Link::SdkRedis);
        if opts.sdk_hosts == 0 {
            let text = match links.get(Link::SdkRedis) {
                Some(_) => setup::local_sdk_toml(env, setup),
                None => setup.sdk_toml.clone(),
            };
            // The operator's REWARD_SDK__* overrides reach this SDK as they reach the
            // services' and the SDK hosts'.
            let cfg = sdk::config::SdkConfig::from_toml_str_with_env(&text)?;
            return Ok(Side::Local(Arc::new(sdk::Sdk::builder(cfg).start().await?)));
        }
        let mut configs = Vec::new();
        for i in 0..opts.sdk_hosts {
            let path = setup.dir.join(format!("sdk-host{i}.toml"));
            std::fs::write(&path, setup::host_sdk_toml(env, setup, i))?;
            configs.push(path);
        }
        eprintln!("replay: {} SDK hosts (child processes)", opts.sdk_hosts);
        Ok(Side::Hosts(Box::new(
            HostPool::start(&setup.dir, configs).await?,
        )))
    }

    /// The downstream double, when a fault breaks the downstream.
    async fn start_double(
        opts: &ReplayOptions,
        setup: &Setup,
    ) -> anyhow::Result<Option<reward_standins::downstream::DownstreamDouble>> {
        let double = if crate::faults::needs_downstream_double(&opts.faults) {
            let ledger = reward_service::downstream::Ledger::connect(
                setup.manifest.ledger_redis(),
                &setup.manifest.ledger_prefix,
                &std::collections::HashMap::new(),
            )
            .await
            .map_err(|e| anyhow::anyhow!("ledger: {e}"))?;
            Some(reward_standins::downstream::DownstreamDouble::start(ledger).await?)
        } else {
            None
        };
        Ok(double)
    }

    /// Starts the collector: samples → histograms, per-second buckets and sent.tsv.
    pub(super) fn start_collector(&self) -> Collector {
        let (tx, rx) = mpsc::unbounded_channel::<Sample>();
        let sent_path = self.dir.join("sent.tsv");
        let task = tokio::spawn(collect::collect(rx, sent_path));
        Collector { samples: tx, task }
    }

    /// Starts the per-second sampler of the SDK's and consumers' counters, then the
    /// faults.
    pub(super) fn start_watchers(&self) -> Watchers {
        let stop = Arc::new(tokio::sync::Notify::new());
        let sampler = tokio::spawn(collect::sample(
            self.sdk.clone(),
            self.dir.clone(),
            self.services.clone(),
            children::credential(&self.setup),
            stop.clone(),
        ));
        let fault_log: FaultLog = Arc::new(std::sync::Mutex::new(Vec::new()));
        let faults = self.opts.faults.clone();
        let targets = Targets {
            services: self.services.clone(),
            script: self.opts.stack_script.clone(),
            setup: self.setup.clone(),
            env: self.env.clone(),
            grpc: self.grpc.clone(),
            double: self.double.clone(),
            links: self.links.clone(),
            side: self.sdk.clone(),
            topology: Arc::default(),
        };
        let faults = tokio::spawn(inject::play(faults, targets, fault_log.clone(), self.start));
        Watchers {
            stop,
            sampler,
            fault_log,
            faults,
        }
    }

    /// Plays every scene's schedule to its end (or until the run is aborted), then
    /// waits for the collector; returns what it collected.
    pub(super) async fn play_schedule(&self, collector: Collector) -> anyhow::Result<Collected> {
        let Collector { samples, task } = collector;
        let expected = self.opts.plan.expected_sends();
        let bar = progress_bar(self.opts.progress, expected as u64, "sending");
        let scenes = self.spawn_scenes(&samples);
        drop(samples);
        self.follow(scenes, &bar).await?;
        bar.finish();
        let collected = task.await??;
        let send_end = self.start.elapsed();
        self.print_schedule_end(&collected, send_end);
        Ok(collected)
    }

    /// One schedule task per scene of the plan.
    fn spawn_scenes(&self, samples: &mpsc::UnboundedSender<Sample>) -> Vec<JoinHandle<()>> {
        let plan = &self.opts.plan;
        let mut scenes = Vec::new();
        for s in &plan.scenes {
            let generator = SceneGen::for_scene(s, plan);
            scenes.push(tokio::spawn(schedule(
                self.sdk.clone(),
                generator,
                s.curve.clone(),
                plan.duplicate_share,
                self.start,
                samples.clone(),
                self.counters.clone(),
            )));
        }
        scenes
    }

    /// Waits for every scene's schedule, updating the progress bar four times a second.
    async fn follow(
        &self,
        scenes: Vec<JoinHandle<()>>,
        bar: &indicatif::ProgressBar,
    ) -> anyhow::Result<()> {
        let counters = &self.counters;
        let mut all = futures_util::future::join_all(scenes);
        loop {
            tokio::select! {
                r = &mut all => { for x in r { x?; } break; }
                () = tokio::time::sleep(Duration::from_millis(250)) => {
                    bar.set_position(counters.scheduled.load(Ordering::Relaxed));
                    bar.set_message(format!(
                        "{} in flight, {} refused, {} shed",
                        counters.in_flight.load(Ordering::Relaxed),
                        counters.refused.load(Ordering::Relaxed),
                        counters.shed.load(Ordering::Relaxed)
                    ));
                }
            }
        }
        Ok(())
    }

    /// Says whether the schedule was stopped early, and what it did.
    fn print_schedule_end(&self, collected: &Collected, send_end: Duration) {
        let counters = &self.counters;
        if counters.aborted.load(Ordering::Relaxed) {
            eprintln!(
                "replay: the load tester could not keep to the schedule (an arrival shed, or one started over {} s late); stopped early, the run is INVALID",
                crate::slo::ABORT_LAG.as_secs()
            );
        }
        eprintln!(
            "replay: schedule done in {:.1} s: {} sent, {} refused, {} shed, {} capped draws",
            send_end.as_secs_f64(),
            collected.sent,
            collected.refused.values().sum::<u64>(),
            counters.shed.load(Ordering::Relaxed),
            counters.capped.load(Ordering::Relaxed)
        );
    }

    /// Drain: events onto a broker, then credits (budgets, then the ledger).
    ///
    /// The cost window ([`Run::measure_cost`]) closes once every sent amount is
    /// spent (every claim made): the ledger wait after it reads every user's account
    /// once a second, the load tester's own checking, which near the end of a short
    /// replay is a large share of the Redis commands per reward and of their CPU
    /// (docs/findings/benchmarks-history.md). The credits still in flight at that
    /// moment (at most the consumers' batches in flight) fall outside the window. With
    /// an SDK host lost the budgets are not waited for, and the window closes after the
    /// ledger wait.
    pub(super) async fn drain(&mut self, collected: &Collected) -> anyhow::Result<()> {
        let limit = Duration::from_secs(self.opts.drain_secs);
        drain::sdk_settled(&self.sdk, limit).await;
        if !self.sdk.lost_a_host() {
            // With a host lost, part of what was sent may never be spent (rewards
            // whose token died with the host); the ledger wait below knows them.
            drain::budgets_spent(
                self.env,
                &self.setup,
                &collected.sent_amount_by_scope,
                self.opts.progress,
                limit,
            )
            .await?;
            self.measure_cost().await;
        }
        let grace = Duration::from_millis(setup::HOST_KILL_GRACE_MS);
        // A token write refused in doubt may still land (held by a network fault, or
        // queued in a client) and be swept: such a reward counts as lost only after
        // the faults have ended, the sweeper's grace and 10 s more.
        let doubts_settle = crate::faults::token_writes_in_doubt(&self.opts.faults).then(|| {
            let end = Duration::from_secs_f64(crate::faults::last_end_secs(&self.opts.faults));
            self.start + end + grace + Duration::from_secs(10)
        });
        // A host killed while Redis was away starts again only once Redis answers:
        // its rewards are judged from its return.
        self.sdk.hosts_back().await;
        let settle = match (self.sdk.lost_settle_at(grace), doubts_settle) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        drain::ledger_complete(&self.dir, limit, settle).await
    }

    /// The cost counters since sending began (call when the drain has ended, before
    /// any process stops); the first call closes the window, later ones keep it.
    pub(super) async fn measure_cost(&mut self) {
        if self.cost.is_some() {
            return;
        }
        let procs = children::procs(&*self.services.lock().await);
        self.cost = Some(self.probe.finish(self.env, &procs).await);
    }

    /// Saves every process's final metrics and stops the consumers and the service;
    /// returns the consumers' final counters.
    pub(super) async fn stop_services(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        // Unlisted first: a process stopped on purpose is not a process down.
        if let Some(p) = &self.published {
            p.withdraw().await;
        }
        children::stop(
            &self.services,
            &self.setup,
            &self.dir,
            self.opts.metrics.as_ref(),
        )
        .await
    }

    /// Closes the SDK (or its hosts) and records its unstored tokens in the
    /// manifest; answers the SDK's final counters.
    pub(super) async fn close_sdk(&mut self) -> anyhow::Result<BTreeMap<String, u64>> {
        // Writes still unanswered at close are as unstored as those given up.
        let (counters, unstored) = self.sdk.close().await?;
        self.setup.manifest.token_write_failures = unstored;
        self.setup.manifest.save(&self.dir)?;
        Ok(counters)
    }

    /// Reconciles the run directory; with `--ceilings`, then measures the parts'
    /// ceilings on the same stack.
    pub(super) async fn reconcile(&self) -> anyhow::Result<(Reconciliation, Option<Ceilings>)> {
        let reconciliation = crate::reconcile::run_patiently(&self.dir).await?;
        let ceilings = if self.opts.ceilings {
            Some(self.measure_ceilings(&reconciliation).await?)
        } else {
            None
        };
        Ok((reconciliation, ceilings))
    }

    async fn measure_ceilings(&self, reconciliation: &Reconciliation) -> anyhow::Result<Ceilings> {
        let n = reconciliation.sent.clamp(20_000, 200_000);
        eprintln!("replay: measuring the parts' ceilings ({n} events each)");
        let raw = reward_baseline::raw_ceiling(self.env, n, self.opts.partitions).await?;
        // The script's records carry a tag of their own, held live while they are
        // written and removed once measured.
        let live = reward_tools::clean::LiveRun::start(&[&self.env.redis_url]).await?;
        let (script, command) = reward_baseline::script_ceiling(self.env, live.tag(), n).await?;
        reward_tools::clean::bench_run(&self.env.redis_url, live.tag()).await;
        live.end().await;
        Ok(Ceilings {
            raw_producer_per_sec: raw,
            claim_script_per_sec: script,
            claim_script_command: command,
            end_to_end_vs_raw_producer: 0.0,
            end_to_end_vs_claim_script: 0.0,
        })
    }

    /// The report: what was collected and reconciled, the ceilings and the wallet's
    /// counters.
    pub(super) fn report(
        &self,
        collected: &Collected,
        watched: Watched,
        consumers: BTreeMap<String, u64>,
        sdk_counters: BTreeMap<String, u64>,
        reconciliation: Reconciliation,
        ceilings: Option<Ceilings>,
    ) -> ReplayReport {
        let counters = &self.counters;
        let mut report = build_report(
            &self.opts.plan,
            &self.setup,
            collected,
            counters.scheduled.load(Ordering::Relaxed),
            counters.shed.load(Ordering::Relaxed),
            &watched.samples,
            sdk_counters,
            counters.aborted.load(Ordering::Relaxed),
            consumers,
            watched.faults,
            reconciliation,
        );
        report.ceilings = ceilings.map(|mut c| {
            let ratio = |ceiling: f64| {
                if ceiling > 0.0 {
                    report.credited_per_sec / ceiling
                } else {
                    0.0
                }
            };
            c.end_to_end_vs_raw_producer = ratio(c.raw_producer_per_sec);
            c.end_to_end_vs_claim_script = ratio(c.claim_script_per_sec);
            c
        });
        let asked: BTreeMap<String, f64> = report
            .limits
            .iter()
            .filter(|(t, _)| self.opts.limits.contains_key(*t))
            .map(|(t, l)| (t.clone(), *l))
            .collect();
        report.limited = super::assemble::limited_rates(&asked, &report.timeline);
        let n = |m: &BTreeMap<String, u64>, k: &str| m.get(k).copied().unwrap_or(0);
        let records = n(&report.sdk, "broker records delivered")
            + n(&report.consumers, "moved")
            + n(&report.consumers, "dead_lettered");
        report.cost = self.cost.clone().map(|mut cost| {
            cost.divide(report.credited, records);
            cost
        });
        if let Some(w) = &self.double {
            report.downstream_double = double_counters(w);
        }
        report.fault_proxies = self
            .links
            .stats()
            .into_iter()
            .map(|(link, s)| {
                let counts = [
                    ("connections", s.connections),
                    ("resets", s.resets),
                    ("up_bytes", s.up_bytes),
                    ("down_bytes", s.down_bytes),
                    ("dropped_bytes", s.dropped_bytes),
                ];
                let counts = counts.iter().map(|(k, v)| (k.to_string(), *v)).collect();
                (link, counts)
            })
            .collect();
        report
    }
}
