//! Reward requests, their validation, and the scene helpers that build them.
//!
//! A request is checked completely before anything is minted, stored or sent, so a
//! rejected request leaves nothing behind. The limits are deliberately tight and
//! typed: the trade number is the global idempotency key of the whole pipeline, and
//! an id that could smuggle the `:` separator into it would let two different
//! rewards share one key (activity `a:b` + scene `c` vs activity `a` + scene `b:c`).
//!
//! ```
//! use sdk::request::{RedEnvelopeRain, User, RequestError, Limits};
//!
//! let rain = RedEnvelopeRain::new("cny2027", "cash");
//! let user = User::new("u42").device("d-9").app("wallet");
//! let req = rain.grab(&user, 3, 888);
//! assert_eq!(req.trade_no, "cny2027:rain:3:u42");
//! assert!(req.validate(&Limits::default()).is_ok());
//!
//! let bad = rain.grab(&User::new("u:42"), 3, 888);
//! assert!(matches!(bad.validate(&Limits::default()), Err(RequestError::BadId { .. })));
//! ```

use std::collections::BTreeMap;

use proto::v1::{RewardEvent, RewardToken, UserInfo};

/// Who wins the reward.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct User {
    /// The user id (required).
    pub user_id: String,
    /// The device id (optional).
    pub device_id: String,
    /// The app the user is in (optional; a token also carries it).
    pub app_id: String,
}

impl User {
    /// A user with only the id set.
    pub fn new(user_id: impl Into<String>) -> Self {
        Self {
            user_id: user_id.into(),
            ..Self::default()
        }
    }

    /// Sets the device id.
    #[must_use]
    pub fn device(mut self, device_id: impl Into<String>) -> Self {
        self.device_id = device_id.into();
        self
    }

    /// Sets the app id.
    #[must_use]
    pub fn app(mut self, app_id: impl Into<String>) -> Self {
        self.app_id = app_id.into();
        self
    }
}

/// One reward, as the activity service asks for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RewardRequest {
    /// The global idempotency key: the same reward always carries the same one.
    pub trade_no: String,
    /// The winner.
    pub user: User,
    /// The activity (campaign) id.
    pub activity_id: String,
    /// The scene within the activity (rain, cards, fireworks, ...).
    pub scene_id: String,
    /// The reward type; must be one the configuration knows.
    pub reward_type: String,
    /// Amount in the type's smallest unit (cents, coins, coupons).
    pub amount: i64,
    /// Shown to the user.
    pub description: String,
    /// Free-form fields handed to the downstream system.
    pub extension: BTreeMap<String, String>,
}

/// Bounds every request must respect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Longest id (user, device, app, activity, scene, reward type), in bytes.
    pub max_id_len: usize,
    /// Longest trade number, in bytes.
    pub max_trade_no_len: usize,
    /// Largest amount of any type (a type may set a lower one).
    pub max_amount: i64,
    /// Most extension fields.
    pub max_extension_fields: usize,
    /// Longest extension key or value, in bytes.
    pub max_extension_len: usize,
    /// Longest description, in bytes.
    pub max_description_len: usize,
}

impl Default for Limits {
    /// The pipeline's limits ([`proto::limits`]); a config may only lower them.
    fn default() -> Self {
        use proto::limits as p;
        Self {
            max_id_len: p::MAX_ID_LEN,
            max_trade_no_len: p::MAX_TRADE_NO_LEN,
            max_amount: p::MAX_AMOUNT,
            max_extension_fields: p::MAX_EXTENSION_FIELDS,
            max_extension_len: p::MAX_EXTENSION_LEN,
            max_description_len: p::MAX_DESCRIPTION_LEN,
        }
    }
}

impl Limits {
    /// The first limit set above the pipeline's own ([`proto::limits`]), by its
    /// config name: an SDK that accepted such a request would send an event the
    /// consumer and the service refuse.
    pub fn above_pipeline(&self) -> Option<(&'static str, u64, u64)> {
        let d = Self::default();
        let wide = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
        let amount = |v: i64| u64::try_from(v).unwrap_or(0);
        [
            ("max_id_len", wide(self.max_id_len), wide(d.max_id_len)),
            (
                "max_trade_no_len",
                wide(self.max_trade_no_len),
                wide(d.max_trade_no_len),
            ),
            ("max_amount", amount(self.max_amount), amount(d.max_amount)),
            (
                "max_extension_fields",
                wide(self.max_extension_fields),
                wide(d.max_extension_fields),
            ),
            (
                "max_extension_len",
                wide(self.max_extension_len),
                wide(d.max_extension_len),
            ),
            (
                "max_description_len",
                wide(self.max_description_len),
                wide(d.max_description_len),
            ),
        ]
        .into_iter()
        .find(|(_, v, max)| v > max)
    }
}

/// Why a request was rejected. Nothing was stored or sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A required id is empty.
    #[error("{field} is empty")]
    EmptyId {
        /// Which field.
        field: &'static str,
    },
    /// An id is longer than allowed.
    #[error("{field} is {len} bytes, more than {max}")]
    IdTooLong {
        /// Which field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An id holds a character ids may not hold (`:`, whitespace, control, non-ASCII).
    #[error("{field} holds {found:?}; ids are printable ASCII without ':' or spaces")]
    BadId {
        /// Which field.
        field: &'static str,
        /// The first offending character.
        found: char,
    },
    /// The trade number is empty, too long or holds a character outside `[A-Za-z0-9_.:-]`.
    #[error("malformed trade number: {reason}")]
    MalformedTradeNo {
        /// What is wrong with it.
        reason: String,
    },
    /// The reward type is not in the configuration.
    #[error("unknown reward type {0:?}")]
    UnknownRewardType(String),
    /// Zero or negative amount.
    #[error("amount {0} is not positive")]
    NonPositiveAmount(i64),
    /// Amount above the type's (or the global) maximum.
    #[error("amount {amount} exceeds the maximum {max} for this reward type")]
    AmountTooLarge {
        /// The amount asked for.
        amount: i64,
        /// The limit.
        max: i64,
    },
    /// Too many extension fields.
    #[error("{count} extension fields, at most {max}")]
    TooManyExtensionFields {
        /// How many were given.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// An extension key or value is too long, or a key is empty.
    #[error("extension field {key:?}: {reason}")]
    BadExtension {
        /// The key (cut to 64 bytes).
        key: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The description is too long.
    #[error("description is {len} bytes, more than {max}")]
    DescriptionTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

fn check_id(
    field: &'static str,
    value: &str,
    required: bool,
    max: usize,
) -> Result<(), RequestError> {
    if value.is_empty() && !required {
        return Ok(());
    }
    // The pipeline's one id rule (`proto::ids`): what is sent here, the service keys.
    match proto::ids::check_id(value, max) {
        Ok(()) => Ok(()),
        Err(proto::ids::IdProblem::Empty) => Err(RequestError::EmptyId { field }),
        Err(proto::ids::IdProblem::TooLong { len, max }) => {
            Err(RequestError::IdTooLong { field, len, max })
        }
        Err(proto::ids::IdProblem::Char(found)) => Err(RequestError::BadId { field, found }),
    }
}

/// Checks a trade number on its own: 1..=`max` bytes (at most
/// [`proto::ids::MAX_ID_LEN`]) of `[A-Za-z0-9_.:-]`, the pipeline's one rule.
pub fn check_trade_no(trade_no: &str, max: usize) -> Result<(), RequestError> {
    proto::ids::check_trade_no(trade_no, max).map_err(|p| RequestError::MalformedTradeNo {
        reason: match p {
            proto::ids::IdProblem::Char(c) => {
                format!("holds {c:?}; allowed are A-Z a-z 0-9 _ . : -")
            }
            other => other.to_string(),
        },
    })
}

fn cut(s: &str, n: usize) -> String {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

impl RewardRequest {
    /// Checks every field against `limits` (the reward type is checked by the caller
    /// that knows the configuration; see [`RewardRequest::validate_type`]).
    pub fn validate(&self, limits: &Limits) -> Result<(), RequestError> {
        check_trade_no(&self.trade_no, limits.max_trade_no_len)?;
        check_id("user_id", &self.user.user_id, true, limits.max_id_len)?;
        check_id("device_id", &self.user.device_id, false, limits.max_id_len)?;
        check_id("app_id", &self.user.app_id, false, limits.max_id_len)?;
        check_id("activity_id", &self.activity_id, true, limits.max_id_len)?;
        check_id("scene_id", &self.scene_id, true, limits.max_id_len)?;
        check_id("reward_type", &self.reward_type, true, limits.max_id_len)?;
        self.check_amount(limits.max_amount)?;
        if self.description.len() > limits.max_description_len {
            return Err(RequestError::DescriptionTooLong {
                len: self.description.len(),
                max: limits.max_description_len,
            });
        }
        if self.extension.len() > limits.max_extension_fields {
            return Err(RequestError::TooManyExtensionFields {
                count: self.extension.len(),
                max: limits.max_extension_fields,
            });
        }
        for (k, v) in &self.extension {
            let reason = if k.is_empty() {
                "empty key"
            } else if k.len() > limits.max_extension_len {
                "key too long"
            } else if v.len() > limits.max_extension_len {
                "value too long"
            } else {
                continue;
            };
            return Err(RequestError::BadExtension {
                key: cut(k, 64),
                reason,
            });
        }
        Ok(())
    }

    /// Checks the amount against a maximum.
    pub fn check_amount(&self, max: i64) -> Result<(), RequestError> {
        if self.amount <= 0 {
            return Err(RequestError::NonPositiveAmount(self.amount));
        }
        if self.amount > max {
            return Err(RequestError::AmountTooLarge {
                amount: self.amount,
                max,
            });
        }
        Ok(())
    }

    /// The token the user receives for this reward.
    pub fn token(&self, now_ms: i64, expires_at_ms: i64) -> RewardToken {
        RewardToken {
            trade_no: self.trade_no.clone(),
            user_id: self.user.user_id.clone(),
            activity_id: self.activity_id.clone(),
            scene_id: self.scene_id.clone(),
            reward_type: self.reward_type.clone(),
            amount: self.amount,
            grant_time_ms: now_ms,
            description: self.description.clone(),
            expires_at_ms,
            app_id: self.user.app_id.clone(),
        }
    }

    /// The event the pipeline carries for this reward (unsigned: the SDK signs it
    /// with [`crate::token::proof`] before it is queued).
    pub fn event(&self, now_ms: i64, expires_at_ms: i64) -> RewardEvent {
        RewardEvent {
            trade_no: self.trade_no.clone(),
            user: Some(UserInfo {
                user_id: self.user.user_id.clone(),
                device_id: self.user.device_id.clone(),
                app_id: self.user.app_id.clone(),
            }),
            activity_id: self.activity_id.clone(),
            scene_id: self.scene_id.clone(),
            reward_type: self.reward_type.clone(),
            amount: self.amount,
            extension: self
                .extension
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            retry_count: 0,
            created_at_ms: now_ms,
            description: self.description.clone(),
            not_before_ms: 0,
            expires_at_ms,
            proof: Vec::new(),
        }
    }
}

/// The trade number of a scene reward: `activity:scene:round:user`. Every part is an
/// id without `:` (checked by [`RewardRequest::validate`]), so distinct rewards never
/// share a trade number, and the same reward asked for twice always does.
pub fn trade_no(activity_id: &str, scene_id: &str, round: u64, user_id: &str) -> String {
    format!("{activity_id}:{scene_id}:{round}:{user_id}")
}

fn scene_request(
    activity_id: &str,
    scene_id: &str,
    reward_type: &str,
    user: &User,
    round: u64,
    amount: i64,
) -> RewardRequest {
    RewardRequest {
        trade_no: trade_no(activity_id, scene_id, round, &user.user_id),
        user: user.clone(),
        activity_id: activity_id.to_string(),
        scene_id: scene_id.to_string(),
        reward_type: reward_type.to_string(),
        amount,
        description: String::new(),
        extension: BTreeMap::new(),
    }
}

/// Red-envelope rain: users grab envelopes in numbered rounds; one reward per user
/// per round.
#[derive(Debug, Clone)]
pub struct RedEnvelopeRain {
    activity_id: String,
    reward_type: String,
}

impl RedEnvelopeRain {
    /// The scene id used in trade numbers.
    pub const SCENE: &'static str = "rain";

    /// A rain in `activity_id` paying `reward_type` (usually cash).
    pub fn new(activity_id: impl Into<String>, reward_type: impl Into<String>) -> Self {
        Self {
            activity_id: activity_id.into(),
            reward_type: reward_type.into(),
        }
    }

    /// The reward for `user` grabbing an envelope worth `amount` in `round`.
    pub fn grab(&self, user: &User, round: u64, amount: i64) -> RewardRequest {
        let mut r = scene_request(
            &self.activity_id,
            Self::SCENE,
            &self.reward_type,
            user,
            round,
            amount,
        );
        r.description = "red envelope".into();
        r
    }
}

/// Card collection: each draw gives the user one card; the draw number is the round.
#[derive(Debug, Clone)]
pub struct CardCollection {
    activity_id: String,
    reward_type: String,
}

impl CardCollection {
    /// The scene id used in trade numbers.
    pub const SCENE: &'static str = "cards";

    /// A card collection in `activity_id` whose cards have type `reward_type`.
    pub fn new(activity_id: impl Into<String>, reward_type: impl Into<String>) -> Self {
        Self {
            activity_id: activity_id.into(),
            reward_type: reward_type.into(),
        }
    }

    /// Card `card_id` for `user` on draw number `draw`.
    pub fn draw(&self, user: &User, draw: u64, card_id: &str) -> RewardRequest {
        let mut r = scene_request(
            &self.activity_id,
            Self::SCENE,
            &self.reward_type,
            user,
            draw,
            1,
        );
        r.description = format!("card {card_id}");
        r.extension.insert("card".into(), card_id.to_string());
        r
    }
}

/// Fireworks: during a show a user may win once per slot (every 30 s in
/// `loadtest/profiles/fireworks.toml`, up to 500 tokens per user as in
/// docs/design.md); the slot number is the round.
#[derive(Debug, Clone)]
pub struct Fireworks {
    activity_id: String,
    reward_type: String,
    slot_ms: i64,
    show_start_ms: i64,
}

impl Fireworks {
    /// The scene id used in trade numbers.
    pub const SCENE: &'static str = "fireworks";

    /// A show starting at `show_start_ms` whose slots last `slot_ms` (30 000 in the
    /// shipped fireworks profile).
    pub fn new(
        activity_id: impl Into<String>,
        reward_type: impl Into<String>,
        show_start_ms: i64,
        slot_ms: i64,
    ) -> Self {
        Self {
            activity_id: activity_id.into(),
            reward_type: reward_type.into(),
            slot_ms: slot_ms.max(1),
            show_start_ms,
        }
    }

    /// The slot a moment falls in (0 before the show starts).
    pub fn slot_at(&self, now_ms: i64) -> u64 {
        u64::try_from((now_ms - self.show_start_ms).max(0) / self.slot_ms).unwrap_or(0)
    }

    /// The reward for `user` winning `amount` at `now_ms`: a second win in the same
    /// slot gets the same trade number, so it is credited once.
    pub fn win(&self, user: &User, now_ms: i64, amount: i64) -> RewardRequest {
        let mut r = scene_request(
            &self.activity_id,
            Self::SCENE,
            &self.reward_type,
            user,
            self.slot_at(now_ms),
            amount,
        );
        r.description = "fireworks".into();
        r
    }
}

#[cfg(test)]
mod tests;
