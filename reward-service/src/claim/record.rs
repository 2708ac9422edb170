//! A trade number's record as stored: its state and its one-string format (module
//! doc of [`super`], "Records").

/// A record's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimState {
    /// Claimed; a credit may be under way.
    InProgress,
    /// A credit's outcome is unknown; the deduction stands until it is resolved.
    InDoubt,
    /// Credited; the result is the receipt.
    Granted,
    /// Failed for good; refunded; the result is the reason.
    Failed,
}

impl ClaimState {
    /// The name stored in Redis.
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimState::InProgress => "IN_PROGRESS",
            ClaimState::InDoubt => "IN_DOUBT",
            ClaimState::Granted => "GRANTED",
            ClaimState::Failed => "FAILED",
        }
    }

    /// The state a stored name stands for.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "IN_PROGRESS" => ClaimState::InProgress,
            "IN_DOUBT" => ClaimState::InDoubt,
            "GRANTED" => ClaimState::Granted,
            "FAILED" => ClaimState::Failed,
            _ => return None,
        })
    }
}

/// The record format `{prefix}:meta` names (`records`): one string a record.
pub const RECORD_FORMAT: &str = "string-v1";

/// A trade number's record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its state.
    pub state: ClaimState,
    /// Its budget scope.
    pub scene: String,
    /// Its activity.
    pub activity_id: String,
    /// The user it was claimed for.
    pub user_id: String,
    /// Its reward type.
    pub reward_type: String,
    /// Its amount.
    pub amount: i64,
    /// The stored result (receipt when granted, reason when failed).
    pub result: String,
}

impl Record {
    /// Reads a stored record (module doc, "Records"): `None` when `text` is not one.
    ///
    /// ```
    /// use reward_service::claim::{ClaimState, Record};
    /// let r = Record::parse("5\nrain/r1\nu1\ncoin\nrain\nGRANTED\n\n\n\ntx:9\nmore").unwrap();
    /// assert_eq!((r.state, r.amount, r.result.as_str()), (ClaimState::Granted, 5, "tx:9\nmore"));
    /// assert!(Record::parse("5\nrain").is_none());
    /// ```
    pub fn parse(text: &str) -> Option<Self> {
        let f: Vec<&str> = text.splitn(10, '\n').collect();
        let [
            amount,
            scene,
            user,
            typ,
            activity,
            state,
            _lease,
            _owner,
            _clean,
            result,
        ] = f.as_slice()
        else {
            return None;
        };
        Some(Record {
            state: ClaimState::parse(state)?,
            scene: (*scene).to_string(),
            activity_id: (*activity).to_string(),
            user_id: (*user).to_string(),
            reward_type: (*typ).to_string(),
            amount: amount.parse().ok()?,
            result: (*result).to_string(),
        })
    }

    /// The stored text of a finished record (what the scripts write; for tools and
    /// benchmarks that lay out a store).
    pub fn stored(&self) -> String {
        format!(
            "{}\n{}\n{}\n{}\n{}\n{}\n\n\n\n{}",
            self.amount,
            self.scene,
            self.user_id,
            self.reward_type,
            self.activity_id,
            self.state.as_str(),
            self.result
        )
    }
}
