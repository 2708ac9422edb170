//! The pipeline's one set of limits: what the SDK accepts, what a consumer lets
//! through to the service and what the reward service credits. Each of them calls
//! [`check_event`] on every event; none keeps a rule of its own. The SDK's `[limits]`
//! section may lower these numbers for its own callers, never raise them (its config
//! is refused at start-up), so an event the SDK sends is always one the service takes.
//!
//! | what | limit |
//! | --- | --- |
//! | user, device, app, activity, scene, reward type ids | [`MAX_ID_LEN`] bytes (rule: [`crate::ids`]) |
//! | trade number | [`MAX_TRADE_NO_LEN`] bytes of `A-Z a-z 0-9 _ . : -` |
//! | amount | 1..=[`MAX_AMOUNT`] (a reward type may set a lower ceiling) |
//! | description | [`MAX_DESCRIPTION_LEN`] bytes |
//! | extension | [`MAX_EXTENSION_FIELDS`] entries, keys 1..=[`MAX_EXTENSION_LEN`] bytes, values up to [`MAX_EXTENSION_LEN`] |
//! | proof | at most [`MAX_PROOF_LEN`] bytes (a valid one is [`PROOF_LEN`]; any other length is a proof that does not verify, `PROOF_FORGED`) |
//! | `not_before_ms` | at most [`MAX_NOT_BEFORE_AHEAD_MS`] ahead of the reader's clock |
//! | `created_at_ms` | set (> 0), at most [`MAX_CREATED_AHEAD_MS`] ahead of the reader's clock ([`check_created`]) |
//! | one encoded event | [`MAX_EVENT_BYTES`] (every field above at its largest) |
//!
//! Ids were allowed up to 256 bytes when an SDK raised its own limit; such ids are
//! refused now everywhere (events `INVALID`, stored tokens counted unreadable by the
//! wallet). A deployment that raised it drains its rewards before it upgrades.
//!
//! Where each is enforced: the SDK's `send_reward` (a typed `RequestError`); the
//! consumer before it batches an event (an event over a limit is dead-lettered
//! `invalid` at once, except one whose `created_at_ms` lies more than the skew but at
//! most an hour ahead: an SDK host's clock running ahead, so it waits in the delay
//! queue until it is within the skew); the reward service on every `Grant`, `GrantAsync` and
//! `GrantBatch` (an event over [`MAX_EVENT_BYTES`] makes the whole call
//! `INVALID_ARGUMENT`, checked before any event is looked at; a field over its limit
//! answers that event `INVALID`).
//!
//! ```
//! use proto::limits::{check_event, Field, Problem};
//! use proto::v1::{RewardEvent, UserInfo};
//!
//! let mut ev = RewardEvent {
//!     trade_no: "cny:rain:1:u42".into(),
//!     user: Some(UserInfo { user_id: "u42".into(), ..Default::default() }),
//!     activity_id: "cny".into(),
//!     scene_id: "rain".into(),
//!     reward_type: "cash".into(),
//!     amount: 888,
//!     ..Default::default()
//! };
//! assert!(check_event(&ev).is_ok());
//! ev.description = "x".repeat(300);
//! let e = check_event(&ev).unwrap_err();
//! assert_eq!(e.field, Field::Description);
//! assert_eq!(e.problem, Problem::TooLong { len: 300, max: 256 });
//! ```

use crate::ids::{IdProblem, check_id, check_trade_no};
pub use crate::ids::{MAX_ID_LEN, MAX_TRADE_NO_LEN};
use crate::v1::RewardEvent;

/// Largest amount of any reward type, in the type's smallest unit.
pub const MAX_AMOUNT: i64 = 1_000_000_000_000;
/// Longest description, in bytes.
pub const MAX_DESCRIPTION_LEN: usize = 256;
/// Most extension entries.
pub const MAX_EXTENSION_FIELDS: usize = 16;
/// Longest extension key or value, in bytes.
pub const MAX_EXTENSION_LEN: usize = 256;
/// Length of an event proof (version, key id, tag; `docs/spec/event-proof.md`).
pub const PROOF_LEN: usize = 1 + 2 + 16;
/// Longest `proof` field an event may carry (room for a later proof version).
pub const MAX_PROOF_LEN: usize = 64;
/// Furthest ahead of a reader's clock an event's `not_before_ms` may lie (1 hour):
/// longer than any backoff the pipeline itself sets, short enough that a record
/// written by a stranger cannot park events in the delay queue for days.
pub const MAX_NOT_BEFORE_AHEAD_MS: i64 = 3_600_000;
/// Furthest ahead of a reader's clock an event's `created_at_ms` may lie (5 minutes of
/// clock skew between hosts; the SDK stamps it from its host's clock).
pub const MAX_CREATED_AHEAD_MS: i64 = 300_000;

/// A length-delimited field of `n` bytes: tag (1 byte), length prefix (up to 3 bytes
/// for these sizes), the bytes.
const fn string(n: usize) -> usize {
    1 + 3 + n
}

/// The largest encoded event within these limits, retries included: every string at
/// its longest, every number at its widest, each with its tag and length prefix.
pub const MAX_EVENT_BYTES: usize = {
    let id = string(MAX_ID_LEN);
    let user = string(3 * id);
    let entry = string(2 * string(MAX_EXTENSION_LEN));
    // amount, created_at_ms, not_before_ms, expires_at_ms: tag + 10-byte varint;
    // retry_count: tag + 5.
    let varints = 4 * (1 + 10) + (1 + 5);
    string(MAX_TRADE_NO_LEN)
        + user
        + 3 * id
        + MAX_EXTENSION_FIELDS * entry
        + string(MAX_DESCRIPTION_LEN)
        + string(MAX_PROOF_LEN)
        + varints
};

/// The field of an event a limit refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// `trade_no`.
    TradeNo,
    /// `user.user_id`.
    UserId,
    /// `user.device_id`.
    DeviceId,
    /// `user.app_id`.
    AppId,
    /// `activity_id`.
    ActivityId,
    /// `scene_id`.
    SceneId,
    /// `reward_type`.
    RewardType,
    /// `amount`.
    Amount,
    /// `description`.
    Description,
    /// `extension`.
    Extension,
    /// `proof`.
    Proof,
    /// `not_before_ms`.
    NotBefore,
    /// `created_at_ms`.
    CreatedAt,
}

impl Field {
    /// The field's name in the `.proto`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TradeNo => "trade_no",
            Self::UserId => "user.user_id",
            Self::DeviceId => "user.device_id",
            Self::AppId => "user.app_id",
            Self::ActivityId => "activity_id",
            Self::SceneId => "scene_id",
            Self::RewardType => "reward_type",
            Self::Amount => "amount",
            Self::Description => "description",
            Self::Extension => "extension",
            Self::Proof => "proof",
            Self::NotBefore => "not_before_ms",
            Self::CreatedAt => "created_at_ms",
        }
    }
}

/// What is wrong with the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// An id or trade number breaks the id rule.
    Id(IdProblem),
    /// Longer than allowed.
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// More entries than allowed.
    TooMany {
        /// How many it holds.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// An extension key is empty.
    EmptyKey,
    /// The amount is not in 1..=max.
    Amount {
        /// The amount.
        amount: i64,
        /// The limit.
        max: i64,
    },
    /// A proof longer than [`MAX_PROOF_LEN`].
    ProofLength(usize),
    /// A time lies too far ahead of the reader's clock.
    TooFarAhead {
        /// How far, in ms.
        ahead_ms: i64,
        /// The limit, in ms.
        max_ms: i64,
    },
    /// A required time is 0 or negative (not set).
    NotSet,
}

/// An event over a limit: which field, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{} {}", .field.as_str(), .problem)]
pub struct LimitError {
    /// The field.
    pub field: Field,
    /// What is wrong with it.
    pub problem: Problem,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Id(p) => write!(f, "{p}"),
            Problem::TooLong { len, max } => write!(f, "is {len} bytes, more than {max}"),
            Problem::TooMany { count, max } => write!(f, "has {count} entries, more than {max}"),
            Problem::EmptyKey => write!(f, "has an empty key"),
            Problem::Amount { amount, max } => write!(f, "is {amount}, not in 1..={max}"),
            Problem::ProofLength(n) => write!(f, "is {n} bytes, more than {MAX_PROOF_LEN}"),
            Problem::TooFarAhead { ahead_ms, max_ms } => {
                write!(
                    f,
                    "lies {ahead_ms} ms ahead of this clock, more than {max_ms}"
                )
            }
            Problem::NotSet => write!(f, "is not set (0 or negative)"),
        }
    }
}

fn at(field: Field) -> impl Fn(Problem) -> LimitError {
    move |problem| LimitError { field, problem }
}

fn id(field: Field, value: &str, required: bool) -> Result<(), LimitError> {
    if value.is_empty() && !required {
        return Ok(());
    }
    check_id(value, MAX_ID_LEN).map_err(|p| at(field)(Problem::Id(p)))
}

fn len(field: Field, value: &str, max: usize) -> Result<(), LimitError> {
    if value.len() > max {
        return Err(at(field)(Problem::TooLong {
            len: value.len(),
            max,
        }));
    }
    Ok(())
}

/// Checks every field of an event against the limits (not the clock: see
/// [`check_not_before`]); the first field over one is named.
pub fn check_event(ev: &RewardEvent) -> Result<(), LimitError> {
    check_trade_no(&ev.trade_no, MAX_TRADE_NO_LEN)
        .map_err(|p| at(Field::TradeNo)(Problem::Id(p)))?;
    let user = ev.user.as_ref();
    id(Field::UserId, user.map_or("", |u| u.user_id.as_str()), true)?;
    id(
        Field::DeviceId,
        user.map_or("", |u| u.device_id.as_str()),
        false,
    )?;
    id(Field::AppId, user.map_or("", |u| u.app_id.as_str()), false)?;
    id(Field::ActivityId, &ev.activity_id, true)?;
    id(Field::SceneId, &ev.scene_id, true)?;
    id(Field::RewardType, &ev.reward_type, true)?;
    if ev.amount <= 0 || ev.amount > MAX_AMOUNT {
        return Err(at(Field::Amount)(Problem::Amount {
            amount: ev.amount,
            max: MAX_AMOUNT,
        }));
    }
    len(Field::Description, &ev.description, MAX_DESCRIPTION_LEN)?;
    if ev.extension.len() > MAX_EXTENSION_FIELDS {
        return Err(at(Field::Extension)(Problem::TooMany {
            count: ev.extension.len(),
            max: MAX_EXTENSION_FIELDS,
        }));
    }
    for (k, v) in &ev.extension {
        if k.is_empty() {
            return Err(at(Field::Extension)(Problem::EmptyKey));
        }
        len(Field::Extension, k, MAX_EXTENSION_LEN)?;
        len(Field::Extension, v, MAX_EXTENSION_LEN)?;
    }
    if ev.proof.len() > MAX_PROOF_LEN {
        return Err(at(Field::Proof)(Problem::ProofLength(ev.proof.len())));
    }
    Ok(())
}

/// Checks that an event's `not_before_ms` lies at most [`MAX_NOT_BEFORE_AHEAD_MS`]
/// ahead of `now_ms`.
pub fn check_not_before(ev: &RewardEvent, now_ms: i64) -> Result<(), LimitError> {
    let ahead_ms = ev.not_before_ms.saturating_sub(now_ms);
    if ahead_ms > MAX_NOT_BEFORE_AHEAD_MS {
        return Err(at(Field::NotBefore)(Problem::TooFarAhead {
            ahead_ms,
            max_ms: MAX_NOT_BEFORE_AHEAD_MS,
        }));
    }
    Ok(())
}

/// Checks that an event says when it was created (`created_at_ms` > 0) and that this
/// lies at most [`MAX_CREATED_AHEAD_MS`] ahead of `now_ms` (clock skew between the
/// SDK's host and the reader). The age checks that follow (grant records' retention,
/// the SLO's end-to-end latency) read it, so an event without one, or dated in the
/// future, would slip past them.
pub fn check_created(ev: &RewardEvent, now_ms: i64) -> Result<(), LimitError> {
    if ev.created_at_ms <= 0 {
        return Err(at(Field::CreatedAt)(Problem::NotSet));
    }
    let ahead_ms = ev.created_at_ms.saturating_sub(now_ms);
    if ahead_ms > MAX_CREATED_AHEAD_MS {
        return Err(at(Field::CreatedAt)(Problem::TooFarAhead {
            ahead_ms,
            max_ms: MAX_CREATED_AHEAD_MS,
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use prost::Message as _;

    use super::*;
    use crate::v1::UserInfo;

    fn largest() -> RewardEvent {
        let long = |n: usize| "x".repeat(n);
        RewardEvent {
            trade_no: long(MAX_TRADE_NO_LEN),
            user: Some(UserInfo {
                user_id: long(MAX_ID_LEN),
                device_id: long(MAX_ID_LEN),
                app_id: long(MAX_ID_LEN),
            }),
            activity_id: long(MAX_ID_LEN),
            scene_id: long(MAX_ID_LEN),
            reward_type: long(MAX_ID_LEN),
            amount: MAX_AMOUNT,
            extension: (0..MAX_EXTENSION_FIELDS)
                .map(|i| {
                    (
                        format!("{i:0>width$}", width = MAX_EXTENSION_LEN),
                        long(MAX_EXTENSION_LEN),
                    )
                })
                .collect(),
            retry_count: u32::MAX,
            created_at_ms: i64::MIN,
            description: long(MAX_DESCRIPTION_LEN),
            not_before_ms: i64::MIN,
            expires_at_ms: i64::MIN,
            proof: vec![0xff; MAX_PROOF_LEN],
        }
    }

    #[test]
    fn the_largest_event_within_the_limits_fits_max_event_bytes() {
        let ev = largest();
        assert!(check_event(&ev).is_ok());
        let n = ev.encoded_len();
        assert!(n <= MAX_EVENT_BYTES, "{n} > {MAX_EVENT_BYTES}");
        // Not wildly generous either: a receiver sizes buffers from it.
        assert!(MAX_EVENT_BYTES < n + 256, "{MAX_EVENT_BYTES} vs {n}");
    }

    type Edit = Box<dyn Fn(&mut RewardEvent)>;

    #[test]
    fn each_field_over_its_limit_is_named() {
        let cases: Vec<(Field, Edit)> = vec![
            (Field::TradeNo, Box::new(|e| e.trade_no.push('x'))),
            (
                Field::UserId,
                Box::new(|e| e.user.as_mut().unwrap().user_id.push('x')),
            ),
            (
                Field::DeviceId,
                Box::new(|e| e.user.as_mut().unwrap().device_id.push('x')),
            ),
            (
                Field::AppId,
                Box::new(|e| e.user.as_mut().unwrap().app_id = "a b".into()),
            ),
            (Field::ActivityId, Box::new(|e| e.activity_id.push('x'))),
            (Field::SceneId, Box::new(|e| e.scene_id = String::new())),
            (Field::RewardType, Box::new(|e| e.reward_type.push('x'))),
            (Field::Amount, Box::new(|e| e.amount += 1)),
            (Field::Amount, Box::new(|e| e.amount = 0)),
            (Field::Description, Box::new(|e| e.description.push('x'))),
            (
                Field::Extension,
                Box::new(|e| {
                    e.extension.insert("k".into(), "v".into());
                }),
            ),
            (
                Field::Extension,
                Box::new(|e| {
                    let k = e.extension.keys().next().unwrap().clone();
                    e.extension.insert(k, "v".repeat(MAX_EXTENSION_LEN + 1));
                }),
            ),
            (Field::Proof, Box::new(|e| e.proof.push(0))),
            (Field::Proof, Box::new(|e| e.proof = vec![1; 4096])),
        ];
        for (field, edit) in cases {
            let mut ev = largest();
            edit(&mut ev);
            assert_eq!(check_event(&ev).unwrap_err().field, field);
        }
        let mut ev = largest();
        ev.extension.clear();
        ev.extension.insert(String::new(), "v".into());
        assert_eq!(
            check_event(&ev).unwrap_err().problem,
            Problem::EmptyKey,
            "empty extension key"
        );
        ev.extension.clear();
        ev.proof.clear();
        ev.user.as_mut().unwrap().device_id.clear();
        assert!(
            check_event(&ev).is_ok(),
            "optional ids and proof may be empty"
        );
    }

    #[test]
    fn not_before_may_lie_at_most_an_hour_ahead() {
        let now = 1_800_000_000_000;
        let mut ev = largest();
        ev.not_before_ms = now + MAX_NOT_BEFORE_AHEAD_MS;
        assert!(check_not_before(&ev, now).is_ok());
        ev.not_before_ms += 1;
        assert_eq!(
            check_not_before(&ev, now).unwrap_err().problem,
            Problem::TooFarAhead {
                ahead_ms: MAX_NOT_BEFORE_AHEAD_MS + 1,
                max_ms: MAX_NOT_BEFORE_AHEAD_MS,
            }
        );
        ev.not_before_ms = i64::MAX;
        assert!(check_not_before(&ev, i64::MIN).is_err());
    }

    #[test]
    fn created_at_must_be_set_and_at_most_five_minutes_ahead() {
        let now = 1_800_000_000_000;
        let mut ev = largest();
        for unset in [0, -1, i64::MIN] {
            ev.created_at_ms = unset;
            let e = check_created(&ev, now).unwrap_err();
            assert_eq!((e.field, e.problem), (Field::CreatedAt, Problem::NotSet));
        }
        ev.created_at_ms = 1;
        assert!(
            check_created(&ev, now).is_ok(),
            "old is the retention check's"
        );
        ev.created_at_ms = now + MAX_CREATED_AHEAD_MS;
        assert!(check_created(&ev, now).is_ok());
        ev.created_at_ms += 1;
        assert_eq!(
            check_created(&ev, now).unwrap_err().problem,
            Problem::TooFarAhead {
                ahead_ms: MAX_CREATED_AHEAD_MS + 1,
                max_ms: MAX_CREATED_AHEAD_MS,
            }
        );
        ev.created_at_ms = i64::MAX;
        assert!(check_created(&ev, i64::MIN).is_err());
        assert_eq!(
            check_created(&ev, now).unwrap_err().to_string(),
            format!(
                "created_at_ms lies {} ms ahead of this clock, more than 300000",
                i64::MAX - now
            )
        );
    }
}
