//! Replay profiles: what traffic a peak event sends, as TOML under `loadtest/profiles/`.
//!
//! # The model
//! A profile is one or more **scenes** (red-envelope rain, card collection, fireworks)
//! over one event of `duration_secs`. Each scene has its own arrival-rate **curve** at
//! full scale, as `[fraction of the event, requests/s]` points with straight lines
//! between them, so an overlap profile is just the scenes of the three single ones with
//! their curves side by side. Each scene draws its users from one shared population
//! (`users`, Zipf-distributed activity: a few users win far more often than most, as on
//! the real night) and its reward types from a weighted mix with an amount range.
//!
//! # Fitting a profile to the machine
//! `--scale S` multiplies every rate and the user count; `--duration D` plays the
//! event's curve over D seconds instead of its real length (the shape is kept, so the
//! total shrinks with it). A 10-minute rain at 1.8 M/s peak becomes, at `--scale 0.002
//! --duration 60`, a one-minute replay peaking at 3 600/s.
//!
//! # Exactly-once bookkeeping
//! Every reward a replay sends has a distinct trade number (the scene helper's
//! `activity:scene:round:user` with the user's own win counter as the round), except
//! the `duplicate_share` of sends that deliberately repeat an earlier request, as a
//! client retrying after a timeout would: those must be credited once, which the
//! reconciliation checks.

use std::path::Path;

use rand::Rng;
use rand_distr::Distribution as _;
use serde::Deserialize;

/// Why a profile was refused.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("cannot read profile {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not TOML of the expected shape.
    #[error("profile {path}: {source}")]
    Parse {
        /// The file.
        path: String,
        /// Why (names the key).
        source: toml::de::Error,
    },
    /// A value out of range.
    #[error("profile {name}: {what}")]
    Invalid {
        /// The profile's name.
        name: String,
        /// What is wrong.
        what: String,
    },
}

/// The kind of scene, which decides how trade numbers are built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SceneKind {
    /// Red-envelope rain: one envelope per user per round.
    Rain,
    /// Card collection: one card per draw.
    Cards,
    /// Fireworks: one win per user per slot, capped per user.
    Fireworks,
}

/// One reward type of a scene's mix.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeMix {
    /// The reward type (must be one the SDK and the reward service know).
    #[serde(rename = "type")]
    pub reward_type: String,
    /// Relative weight in the mix.
    pub weight: f64,
    /// Smallest and largest amount, inclusive, in the smallest unit.
    pub amount: [i64; 2],
}

/// One scene of a profile.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scene {
    /// What kind of scene.
    pub kind: SceneKind,
    /// The activity id.
    pub activity: String,
    /// `[fraction of the event, requests/s at full scale]`, fractions rising from 0 to
    /// 1, rates ≥ 0; straight lines between points.
    pub curve: Vec<[f64; 2]>,
    /// The reward types handed out.
    pub types: Vec<TypeMix>,
    /// Most wins one user may get in this scene (fireworks: 500, docs/design.md); a
    /// draw of a user at the cap draws again.
    #[serde(default)]
    pub max_per_user: Option<u32>,
}

impl Scene {
    /// The scene id used in trade numbers and budgets.
    pub fn scene_id(&self) -> &'static str {
        match self.kind {
            SceneKind::Rain => sdk::request::RedEnvelopeRain::SCENE,
            SceneKind::Cards => sdk::request::CardCollection::SCENE,
            SceneKind::Fireworks => sdk::request::Fireworks::SCENE,
        }
    }
}

/// A replay profile as written in its file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Short name (used in report titles).
    pub name: String,
    /// What it stands for.
    pub description: String,
    /// The real event's length.
    pub duration_secs: f64,
    /// Distinct users at full scale.
    pub users: u64,
    /// Zipf exponent of user activity (0: every user equally likely).
    pub zipf_exponent: f64,
    /// Share of sends that repeat an earlier request (0..1).
    #[serde(default)]
    pub duplicate_share: f64,
    /// The scenes.
    pub scenes: Vec<Scene>,
    /// The service-level targets a replay of this profile is judged against
    /// (`[slo]`; see [`crate::slo`] for the names and defaults).
    #[serde(default)]
    pub slo: crate::slo::Targets,
}

impl Profile {
    /// Reads and checks a profile file.
    pub fn load(path: &Path) -> Result<Self, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and checks profile text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ProfileError> {
        let p: Profile = toml::from_str(text).map_err(|source| ProfileError::Parse {
            path: origin.to_string(),
            source,
        })?;
        p.check()?;
        Ok(p)
    }

    fn check(&self) -> Result<(), ProfileError> {
        let bad = |what: String| {
            Err(ProfileError::Invalid {
                name: self.name.clone(),
                what,
            })
        };
        if !(self.duration_secs.is_finite() && self.duration_secs > 0.0) {
            return bad(format!(
                "duration_secs must be > 0, got {}",
                self.duration_secs
            ));
        }
        if self.users == 0 {
            return bad("users must be at least 1".into());
        }
        if let Err(e) = self.slo.check() {
            return bad(format!("[slo]: {}", e.0));
        }
        if !(self.zipf_exponent.is_finite() && self.zipf_exponent >= 0.0) {
            return bad(format!(
                "zipf_exponent must be >= 0, got {}",
                self.zipf_exponent
            ));
        }
        if !(0.0..1.0).contains(&self.duplicate_share) {
            return bad(format!(
                "duplicate_share must be in 0..1, got {}",
                self.duplicate_share
            ));
        }
        if self.scenes.is_empty() {
            return bad("no [[scenes]]".into());
        }
        for (i, s) in self.scenes.iter().enumerate() {
            let at = format!("scenes[{i}] ({:?} {})", s.kind, s.activity);
            if s.activity.is_empty() || s.activity.contains([':', '{', '}']) {
                return bad(format!("{at}: activity must be set, without ':' or braces"));
            }
            if s.curve.len() < 2 {
                return bad(format!("{at}: curve needs at least two points"));
            }
            let first = s.curve[0][0];
            let last = s.curve[s.curve.len() - 1][0];
            if first != 0.0 || last != 1.0 {
                return bad(format!("{at}: curve must run from fraction 0 to 1"));
            }
            for w in s.curve.windows(2) {
                if w[1][0] <= w[0][0] {
                    return bad(format!("{at}: curve fractions must rise, {w:?}"));
                }
            }
            if s.curve.iter().any(|p| !(p[1].is_finite() && p[1] >= 0.0)) {
                return bad(format!("{at}: curve rates must be >= 0"));
            }
            if s.types.is_empty() {
                return bad(format!("{at}: no types"));
            }
            for t in &s.types {
                if !(t.weight.is_finite() && t.weight > 0.0) {
                    return bad(format!("{at}: type {} weight must be > 0", t.reward_type));
                }
                if t.amount[0] <= 0 || t.amount[1] < t.amount[0] {
                    return bad(format!(
                        "{at}: type {} amount must be [min, max] with 0 < min <= max",
                        t.reward_type
                    ));
                }
            }
            if s.max_per_user == Some(0) {
                return bad(format!("{at}: max_per_user must be at least 1"));
            }
        }
        Ok(())
    }

    /// The profile fitted to this run: rates and users times `scale`, the curve played
    /// over `duration_secs` (the profile's own length if `None`).
    pub fn plan(&self, scale: f64, duration_secs: Option<f64>) -> Result<Plan, ProfileError> {
        let invalid = |what: String| ProfileError::Invalid {
            name: self.name.clone(),
            what,
        };
        if !(scale.is_finite() && scale > 0.0) {
            return Err(invalid(format!("--scale must be > 0, got {scale}")));
        }
        let duration = duration_secs.unwrap_or(self.duration_secs);
        if !(duration.is_finite() && duration > 0.0) {
            return Err(invalid(format!("--duration must be > 0, got {duration}")));
        }
        let users = ((self.users as f64 * scale).round() as u64).max(1);
        let scenes = self
            .scenes
            .iter()
            .map(|s| ScenePlan {
                scene: s.clone(),
                curve: Curve::new(
                    s.curve
                        .iter()
                        .map(|p| (p[0] * duration, p[1] * scale))
                        .collect(),
                ),
            })
            .collect();
        Ok(Plan {
            name: self.name.clone(),
            duration_secs: duration,
            users,
            zipf_exponent: self.zipf_exponent,
            duplicate_share: self.duplicate_share,
            scenes,
            slo: self.slo.clone(),
        })
    }
}

/// A profile fitted to one run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The profile's name.
    pub name: String,
    /// The replay's length.
    pub duration_secs: f64,
    /// Users after scaling.
    pub users: u64,
    /// Zipf exponent.
    pub zipf_exponent: f64,
    /// Share of repeated sends.
    pub duplicate_share: f64,
    /// Each scene with its scaled curve.
    pub scenes: Vec<ScenePlan>,
    /// The SLO targets (the profile's, with the run's overrides).
    pub slo: crate::slo::Targets,
}

impl Plan {
    /// Sends expected over the whole replay (all scenes, before duplicates).
    pub fn expected_sends(&self) -> f64 {
        self.scenes.iter().map(|s| s.curve.total()).sum()
    }

    /// Highest total rate at any curve point (rates are linear between points, so
    /// the peak of the sum is at one of them).
    pub fn peak_rate(&self) -> f64 {
        let mut times: Vec<f64> = self
            .scenes
            .iter()
            .flat_map(|s| s.curve.points.iter().map(|p| p.0))
            .collect();
        times.sort_by(f64::total_cmp);
        times
            .iter()
            .map(|&t| self.scenes.iter().map(|s| s.curve.rate_at(t)).sum::<f64>())
            .fold(0.0, f64::max)
    }
}

/// One scene of a plan.
#[derive(Debug, Clone)]
pub struct ScenePlan {
    /// The scene as in the profile.
    pub scene: Scene,
    /// Its arrival curve in seconds and requests/s.
    pub curve: Curve,
}

/// A piecewise-linear arrival rate over time, with its integral (expected arrivals)
/// and the integral's inverse (when the n-th arrival is due).
#[derive(Debug, Clone)]
pub struct Curve {
    /// `(seconds, rate)`.
    points: Vec<(f64, f64)>,
    /// Expected arrivals up to each point.
    cumulative: Vec<f64>,
}

impl Curve {
    /// `points` as `(seconds, rate)`, seconds rising.
    pub fn new(points: Vec<(f64, f64)>) -> Self {
        let mut cumulative = Vec::with_capacity(points.len());
        let mut sum = 0.0;
        cumulative.push(0.0);
        for w in points.windows(2) {
            sum += (w[1].0 - w[0].0) * (w[0].1 + w[1].1) / 2.0;
            cumulative.push(sum);
        }
        Self { points, cumulative }
    }

    /// The curve's end, seconds.
    pub fn end(&self) -> f64 {
        self.points.last().map_or(0.0, |p| p.0)
    }

    /// Expected arrivals over the whole curve.
    pub fn total(&self) -> f64 {
        self.cumulative.last().copied().unwrap_or(0.0)
    }

    fn segment(&self, t: f64) -> usize {
        // The last point at or before t, never the final point.
        let i = self.points.partition_point(|p| p.0 <= t);
        i.saturating_sub(1).min(self.points.len().saturating_sub(2))
    }

    /// The rate at `t` seconds (0 outside the curve).
    pub fn rate_at(&self, t: f64) -> f64 {
        if self.points.len() < 2 || t < 0.0 || t > self.end() {
            return 0.0;
        }
        let i = self.segment(t);
        let (t0, r0) = self.points[i];
        let (t1, r1) = self.points[i + 1];
        r0 + (r1 - r0) * (t - t0) / (t1 - t0)
    }

    /// Expected arrivals in `[0, t]`.
    pub fn count_at(&self, t: f64) -> f64 {
        if self.points.len() < 2 || t <= 0.0 {
            return 0.0;
        }
        if t >= self.end() {
            return self.total();
        }
        let i = self.segment(t);
        let (t0, r0) = self.points[i];
        let x = t - t0;
        self.cumulative[i] + x * (r0 + self.rate_at(t)) / 2.0
    }

    /// When the expected arrival count reaches `n` (None past the curve's total).
    pub fn time_of(&self, n: f64) -> Option<f64> {
        if self.points.len() < 2 || n > self.total() || n < 0.0 {
            return None;
        }
        // The segment whose cumulative range holds n.
        let i = self
            .cumulative
            .partition_point(|&c| c < n)
            .saturating_sub(1)
            .min(self.points.len() - 2);
        let (t0, r0) = self.points[i];
        let (t1, r1) = self.points[i + 1];
        let rem = n - self.cumulative[i];
        let slope = (r1 - r0) / (t1 - t0);
        // rem = r0 x + slope x² / 2, solved for x in [0, t1 - t0].
        let x = if slope.abs() < 1e-12 {
            if r0 > 0.0 { rem / r0 } else { 0.0 }
        } else {
            let disc = (r0 * r0 + 2.0 * slope * rem).max(0.0);
            (disc.sqrt() - r0) / slope
        };
        Some(t0 + x.clamp(0.0, t1 - t0))
    }
}

/// Draws user ranks 1..=n, Zipf-distributed (rank 1 the most active).
#[derive(Debug, Clone)]
pub struct Users {
    n: u64,
    zipf: Option<rand_distr::Zipf<f64>>,
}

impl Users {
    /// `n` users with exponent `s` (0: uniform).
    pub fn new(n: u64, s: f64) -> Self {
        let zipf = if s > 0.0 {
            rand_distr::Zipf::new(n as f64, s).ok()
        } else {
            None
        };
        Self { n: n.max(1), zipf }
    }

    /// A user rank in `1..=n`.
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        match &self.zipf {
            Some(z) => (z.sample(rng) as u64).clamp(1, self.n),
            None => rng.random_range(1..=self.n),
        }
    }
}

/// Picks a reward type and amount from a scene's mix.
#[derive(Debug, Clone)]
pub struct Mix {
    types: Vec<TypeMix>,
    cumulative: Vec<f64>,
}

impl Mix {
    /// From a scene's types (weights > 0, checked by the profile).
    pub fn new(types: &[TypeMix]) -> Self {
        let mut sum = 0.0;
        let cumulative = types
            .iter()
            .map(|t| {
                sum += t.weight;
                sum
            })
            .collect();
        Self {
            types: types.to_vec(),
            cumulative,
        }
    }

    /// A reward type and an amount within its range.
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R) -> (&str, i64) {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let x = rng.random_range(0.0..total.max(f64::MIN_POSITIVE));
        let i = self
            .cumulative
            .partition_point(|&c| c <= x)
            .min(self.types.len() - 1);
        let t = &self.types[i];
        (&t.reward_type, rng.random_range(t.amount[0]..=t.amount[1]))
    }

    /// The largest amount any type may draw.
    pub fn max_amount(&self) -> i64 {
        self.types.iter().map(|t| t.amount[1]).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
