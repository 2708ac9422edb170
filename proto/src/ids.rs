//! The one id rule of the pipeline: what the SDK accepts, the reward service can key
//! and credit. Both call these functions; neither has a rule of its own.
//!
//! - **Ids** (user, device, app, activity, scene, reward type): 1..=[`MAX_ID_LEN`]
//!   (64) bytes of printable ASCII, without `:` (the key separator), `{` `}` (Redis
//!   Cluster hash tags), `/` (the `activity/scene` budget scope) or `|` (the due
//!   index's `user|activity|trade` entries). Device and app ids may be empty.
//! - **Trade numbers**: 1..=[`MAX_TRADE_NO_LEN`] (200) bytes of `A-Z a-z 0-9 _ . : -`.
//!
//! The other limits of an event (sizes of its other fields, of the whole encoding)
//! are in [`crate::limits`] (which re-exports these two lengths).
//!
//! ```
//! use proto::ids::{check_id, check_trade_no, IdProblem};
//!
//! assert!(check_id("u42", proto::ids::MAX_ID_LEN).is_ok());
//! assert_eq!(check_id("a{b}", 64), Err(IdProblem::Char('{')));
//! assert_eq!(check_id("cny/rain", 64), Err(IdProblem::Char('/')));
//! assert!(check_trade_no("cny2027:rain:r1:u42", 64).is_ok());
//! ```

use crate::v1::{RewardEvent, RewardToken};

/// Longest id (user, device, app, activity, scene, reward type), in bytes.
pub const MAX_ID_LEN: usize = 64;
/// Longest trade number, in bytes.
pub const MAX_TRADE_NO_LEN: usize = 200;

/// What is wrong with an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdProblem {
    /// It is empty.
    Empty,
    /// It is longer than allowed.
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// It holds a character the rule forbids.
    Char(char),
}

impl std::fmt::Display for IdProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdProblem::Empty => write!(f, "is empty"),
            IdProblem::TooLong { len, max } => write!(f, "is {len} bytes, more than {max}"),
            IdProblem::Char(c) => write!(f, "holds {c:?}"),
        }
    }
}

fn length(value: &str, max: usize) -> Result<(), IdProblem> {
    if value.is_empty() {
        return Err(IdProblem::Empty);
    }
    if value.len() > max {
        return Err(IdProblem::TooLong {
            len: value.len(),
            max,
        });
    }
    Ok(())
}

/// Checks an id against the rule, at most `max` bytes (never more than
/// [`MAX_ID_LEN`]).
pub fn check_id(value: &str, max: usize) -> Result<(), IdProblem> {
    length(value, max.min(MAX_ID_LEN))?;
    match value
        .chars()
        .find(|c| !c.is_ascii_graphic() || matches!(c, ':' | '{' | '}' | '/' | '|'))
    {
        Some(c) => Err(IdProblem::Char(c)),
        None => Ok(()),
    }
}

/// Checks a trade number against the rule, at most `max` bytes (never more than
/// [`MAX_TRADE_NO_LEN`]).
pub fn check_trade_no(value: &str, max: usize) -> Result<(), IdProblem> {
    length(value, max.min(MAX_TRADE_NO_LEN))?;
    match value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
    {
        Some(c) => Err(IdProblem::Char(c)),
        None => Ok(()),
    }
}

/// Checks every id an event carries; the error names the field.
pub fn check_event(ev: &RewardEvent) -> Result<(), (&'static str, IdProblem)> {
    let user_id = ev.user.as_ref().map_or("", |u| u.user_id.as_str());
    check_trade_no(&ev.trade_no, MAX_TRADE_NO_LEN).map_err(|p| ("trade_no", p))?;
    for (name, v) in [
        ("user.user_id", user_id),
        ("activity_id", ev.activity_id.as_str()),
        ("scene_id", ev.scene_id.as_str()),
        ("reward_type", ev.reward_type.as_str()),
    ] {
        check_id(v, MAX_ID_LEN).map_err(|p| (name, p))?;
    }
    Ok(())
}

/// Checks every id a token carries; the error names the field.
pub fn check_token(t: &RewardToken) -> Result<(), (&'static str, IdProblem)> {
    check_trade_no(&t.trade_no, MAX_TRADE_NO_LEN).map_err(|p| ("trade_no", p))?;
    for (name, v) in [
        ("user_id", t.user_id.as_str()),
        ("activity_id", t.activity_id.as_str()),
        ("scene_id", t.scene_id.as_str()),
        ("reward_type", t.reward_type.as_str()),
    ] {
        check_id(v, MAX_ID_LEN).map_err(|p| (name, p))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_rule_refuses_key_breaking_characters_and_lengths() {
        for bad in ["a:b", "a{b", "a}b", "a/b", "a|b", "a b", "é", "a\nb"] {
            assert!(check_id(bad, 64).is_err(), "{bad:?}");
        }
        assert_eq!(check_id("", 64), Err(IdProblem::Empty));
        assert_eq!(
            check_id(&"x".repeat(300), 1000),
            Err(IdProblem::TooLong { len: 300, max: 64 })
        );
        assert!(check_id("user-42_x.y", 64).is_ok());
        assert!(check_trade_no("a:b.c_d-1", 64).is_ok());
        assert_eq!(check_trade_no("a/b", 64), Err(IdProblem::Char('/')));
    }
}
