//! The open-model schedule: each scene's requests are generated and started when
//! due, each as its own task, with the counters every scene shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::SeedableRng as _;
use sdk::request::{CardCollection, Fireworks, RedEnvelopeRain, RewardRequest, User};
use tokio::sync::mpsc;

use super::hosts::{Sent, Side};
use crate::profile::{Mix, Plan, SceneKind, ScenePlan, Users};
use crate::reconcile::SentReward;
use reward_runtime::clock::now_ms as unix_ms;

/// The refusal of a token write that failed for the whole wait: in doubt (see
/// [`Sample::in_doubt`]).
pub(super) const STORE_REFUSAL: &str = "store";

/// The refusal of a call whose event was on its way when its wait passed
/// (`sdk::SendError::InDoubt`): in doubt, and most likely credited.
pub(super) const EVENT_IN_DOUBT: &str = "in_doubt";

/// Whether a refusal leaves its reward in doubt (it may be credited).
pub(super) fn refused_in_doubt(kind: &str) -> bool {
    kind == STORE_REFUSAL || kind == EVENT_IN_DOUBT
}

pub(super) struct Sample {
    pub(super) second: u64,
    pub(super) intended_us: u64,
    pub(super) start_us: u64,
    pub(super) end_us: u64,
    pub(super) outcome: Result<(SentReward, bool), &'static str>,
    /// An accepted call: which store held the reward when it answered
    /// (`sdk::HeldBy::label`).
    pub(super) held_by: Option<&'static str>,
    /// A send whose outcome is unknown: its SDK host died before answering (the
    /// refusal `sdk_host_died`), or the SDK refused it because its token write failed
    /// for the whole wait (`store`: an attempt that timed out may still have landed,
    /// and its reward is then credited), or its event was on its way when the wait
    /// passed (`in_doubt`). Kept for reconciliation either way.
    pub(super) in_doubt: Option<(SentReward, bool)>,
}

/// Builds one scene's requests: user draw (respecting the per-user cap), type and
/// amount, the scene helper's trade number with the user's own win counter as round.
pub(super) struct SceneGen {
    kind: SceneKind,
    activity: String,
    users: Users,
    mix: Mix,
    wins: Vec<u32>,
    cap: u32,
    recent: Vec<RewardRequest>,
}

impl SceneGen {
    /// The generator of one scene of the plan.
    pub(super) fn for_scene(s: &ScenePlan, plan: &Plan) -> Self {
        let users = plan.users;
        Self {
            kind: s.scene.kind,
            activity: s.scene.activity.clone(),
            users: Users::new(users, plan.zipf_exponent),
            mix: Mix::new(&s.scene.types),
            wins: vec![0; usize::try_from(users + 1).unwrap_or(usize::MAX)],
            cap: s.scene.max_per_user.unwrap_or(u32::MAX),
            recent: Vec::new(),
        }
    }

    fn next<R: rand::Rng>(
        &mut self,
        rng: &mut R,
        repeat_share: f64,
    ) -> Option<(RewardRequest, bool)> {
        if !self.recent.is_empty() && rng.random_bool(repeat_share) {
            let i = rng.random_range(0..self.recent.len());
            return Some((self.recent[i].clone(), true));
        }
        let mut rank = None;
        for _ in 0..16 {
            let r = self.users.draw(rng);
            if self.wins[r as usize] < self.cap {
                rank = Some(r);
                break;
            }
        }
        let rank = rank?;
        self.wins[rank as usize] += 1;
        let round = u64::from(self.wins[rank as usize]);
        let user = User {
            user_id: rank.to_string(),
            device_id: String::new(),
            app_id: String::new(),
        };
        let (ty, amount) = self.mix.draw(rng);
        let req = match self.kind {
            SceneKind::Rain => RedEnvelopeRain::new(&self.activity, ty).grab(&user, round, amount),
            SceneKind::Cards => {
                let mut r = CardCollection::new(&self.activity, ty).draw(&user, round, "c1");
                r.amount = amount;
                r
            }
            SceneKind::Fireworks => Fireworks::new(&self.activity, ty, 0, 1).win(
                &user,
                i64::try_from(round).unwrap_or(i64::MAX),
                amount,
            ),
        };
        if self.recent.len() < 4096 {
            self.recent.push(req.clone());
        } else {
            let i = rng.random_range(0..self.recent.len());
            self.recent[i] = req.clone();
        }
        Some((req, false))
    }
}

/// The schedule's counters, shared by every scene.
#[derive(Debug, Default)]
pub(super) struct Counters {
    /// `send_reward` calls not yet returned.
    pub(super) in_flight: AtomicU64,
    /// Arrivals due so far.
    pub(super) scheduled: AtomicU64,
    /// Arrivals shed (too many in flight).
    pub(super) shed: AtomicU64,
    /// Arrivals dropped because every user drawn was at the scene's cap.
    pub(super) capped: AtomicU64,
    /// Sends the SDK refused (the progress bar's live error count).
    pub(super) refused: AtomicU64,
    /// A request started more than [`crate::slo::ABORT_LAG`] late: the schedule stops.
    pub(super) aborted: std::sync::atomic::AtomicBool,
    /// Requests in flight past which arrivals are shed (set once, at start).
    pub(super) max_in_flight: u64,
}

/// One arrival the schedule has started: its request and when it was due.
struct Arrival {
    req: RewardRequest,
    repeat: bool,
    due: Instant,
    intended_us: u64,
}

/// Runs the schedule of one scene until its curve ends.
pub(super) async fn schedule(
    sdk: Arc<Side>,
    mut generator: SceneGen,
    curve: crate::profile::Curve,
    repeat_share: f64,
    start: Instant,
    samples: mpsc::UnboundedSender<Sample>,
    counters: Arc<Counters>,
) {
    let Counters {
        in_flight,
        scheduled,
        shed,
        capped,
        ..
    } = &*counters;
    let mut rng = rand::rngs::StdRng::from_os_rng();
    let mut n: u64 = 0;
    while let Some(t) = curve.time_of((n + 1) as f64) {
        if counters.aborted.load(Ordering::Relaxed) {
            break;
        }
        n += 1;
        let due = start + Duration::from_secs_f64(t);
        let now = Instant::now();
        if due > now {
            tokio::time::sleep_until(due.into()).await;
        }
        scheduled.fetch_add(1, Ordering::Relaxed);
        let intended_us = (due - start).as_micros() as u64;
        if in_flight.load(Ordering::Relaxed) >= counters.max_in_flight {
            // The generator cannot keep up: the run is invalid; stop it.
            shed.fetch_add(1, Ordering::Relaxed);
            counters.aborted.store(true, Ordering::Relaxed);
            break;
        }
        let Some((req, repeat)) = generator.next(&mut rng, repeat_share) else {
            capped.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        in_flight.fetch_add(1, Ordering::Relaxed);
        let sdk = sdk.clone();
        let samples = samples.clone();
        let counters = counters.clone();
        let arrival = Arrival {
            req,
            repeat,
            due,
            intended_us,
        };
        tokio::spawn(send_one(sdk, arrival, start, samples, counters));
    }
}

/// Sends one arrival through the SDK (its own task) and reports the outcome as a
/// sample.
async fn send_one(
    sdk: Arc<Side>,
    arrival: Arrival,
    start: Instant,
    samples: mpsc::UnboundedSender<Sample>,
    counters: Arc<Counters>,
) {
    let Arrival {
        req,
        repeat,
        due,
        intended_us,
    } = arrival;
    let started = Instant::now();
    if started.saturating_duration_since(due) > crate::slo::ABORT_LAG {
        counters.aborted.store(true, Ordering::Relaxed);
    }
    let sent_unix_ms = unix_ms();
    let r = sdk.send(req.clone()).await;
    let end = Instant::now();
    counters.in_flight.fetch_sub(1, Ordering::Relaxed);
    let reward = SentReward {
        trade_no: req.trade_no,
        user_id: req.user.user_id,
        activity_id: req.activity_id,
        scene_id: req.scene_id,
        reward_type: req.reward_type,
        amount: req.amount,
        sent_unix_ms,
        // Every accepted reward's token is expected in the store, whatever the
        // call answered (a failed write is retried); reconcile counts the missing
        // ones, the SLO judges their share.
        stored: true,
    };
    let held_by = match r {
        Sent::Accepted(path) => Some(path),
        _ => None,
    };
    let (outcome, in_doubt) = match r {
        Sent::Accepted(_) => (Ok((reward, repeat)), None),
        Sent::Refused(kind) if refused_in_doubt(kind) => {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            (Err(kind), Some((reward, repeat)))
        }
        Sent::Refused(kind) => {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            (Err(kind), None)
        }
        Sent::InDoubt => {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            (Err("sdk_host_died"), Some((reward, repeat)))
        }
    };
    let _ = samples.send(Sample {
        second: intended_us / 1_000_000,
        intended_us,
        start_us: (started - start).as_micros() as u64,
        end_us: (end - start).as_micros() as u64,
        outcome,
        held_by,
        in_doubt,
    });
}

pub(super) fn progress_bar(on: bool, len: u64, what: &str) -> indicatif::ProgressBar {
    if !on {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{prefix:>20} [{elapsed_precise}] {wide_bar} {pos}/{len} {per_sec} {msg}",
    ) {
        bar.set_style(style);
    }
    bar.set_prefix(what.to_string());
    bar
}
