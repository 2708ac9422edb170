//! A refused reward, as the agent answers it: [`sdk::SendError`] turned into the
//! typed `reward.v1.AgentError` every client classifies by (the codes and what each
//! asks of the caller: `proto/proto/reward/v1/agent.proto`).
//!
//! ```
//! use proto::v1::AgentErrorCode;
//! use sdk::request::RequestError;
//!
//! let e = sdk::SendError::Invalid(RequestError::EmptyId { field: "user_id" });
//! let answer = reward_agent::refusal::of(&e);
//! assert_eq!(answer.code(), AgentErrorCode::InvalidReward);
//! assert_eq!(answer.field, "user.user_id");
//! assert_eq!(reward_agent::refusal::label(answer.code()), "invalid_reward");
//! ```

use proto::v1::{AgentError, AgentErrorCode};
use sdk::SendError;
use sdk::request::RequestError;

/// The typed answer for a refused reward.
pub fn of(e: &SendError) -> AgentError {
    let (code, field) = match e {
        SendError::Invalid(RequestError::UnknownRewardType(_)) => {
            (AgentErrorCode::UnknownRewardType, "reward_type")
        }
        SendError::Invalid(r) => (AgentErrorCode::InvalidReward, field_of(r)),
        SendError::Backpressure(_) => (AgentErrorCode::Backpressure, ""),
        SendError::Closed => (AgentErrorCode::Closing, ""),
        SendError::TooManyTokens { .. } => (AgentErrorCode::TooManyTokens, ""),
        SendError::Store(_) => (AgentErrorCode::StoreFailed, ""),
        SendError::InDoubt(_) => (AgentErrorCode::SentInDoubt, ""),
        SendError::Seal(_) => (AgentErrorCode::SealFailed, ""),
    };
    AgentError {
        code: code.into(),
        field: field.to_string(),
        message: e.to_string(),
    }
}

/// The answer for a reward the agent refuses because it is stopping.
pub fn closing() -> AgentError {
    of(&SendError::Closed)
}

/// The request field a malformed reward is refused for, as the `.proto` names it.
fn field_of(e: &RequestError) -> &'static str {
    match e {
        RequestError::EmptyId { field }
        | RequestError::IdTooLong { field, .. }
        | RequestError::BadId { field, .. } => match *field {
            "user_id" => "user.user_id",
            "device_id" => "user.device_id",
            "app_id" => "user.app_id",
            other => other,
        },
        RequestError::MalformedTradeNo { .. } => "trade_no",
        RequestError::UnknownRewardType(_) => "reward_type",
        RequestError::NonPositiveAmount(_) | RequestError::AmountTooLarge { .. } => "amount",
        RequestError::TooManyExtensionFields { .. } | RequestError::BadExtension { .. } => {
            "extension"
        }
        RequestError::DescriptionTooLong { .. } => "description",
    }
}

/// The code's label in metrics (`reward_agent_rewards_total{outcome}`) and logs.
pub fn label(code: AgentErrorCode) -> &'static str {
    match code {
        AgentErrorCode::Unspecified => "unspecified",
        AgentErrorCode::InvalidReward => "invalid_reward",
        AgentErrorCode::UnknownRewardType => "unknown_reward_type",
        AgentErrorCode::Backpressure => "backpressure",
        AgentErrorCode::TooManyTokens => "too_many_tokens",
        AgentErrorCode::Closing => "closing",
        AgentErrorCode::StoreFailed => "store_failed",
        AgentErrorCode::SentInDoubt => "sent_in_doubt",
        AgentErrorCode::SealFailed => "seal_failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_field_is_named_as_the_proto_names_it() {
        for (sdk_field, proto_field) in [
            ("user_id", "user.user_id"),
            ("device_id", "user.device_id"),
            ("app_id", "user.app_id"),
            ("activity_id", "activity_id"),
            ("scene_id", "scene_id"),
            ("reward_type", "reward_type"),
        ] {
            let e = SendError::Invalid(RequestError::EmptyId { field: sdk_field });
            assert_eq!(of(&e).field, proto_field);
        }
        let e = SendError::Invalid(RequestError::UnknownRewardType("gold".into()));
        assert_eq!(of(&e).code(), AgentErrorCode::UnknownRewardType);
        assert_eq!(of(&SendError::Closed).code(), AgentErrorCode::Closing);
        assert_eq!(
            of(&SendError::TooManyTokens { cap: 3 }).code(),
            AgentErrorCode::TooManyTokens
        );
    }
}
