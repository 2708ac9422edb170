//! Grants held in doubt: listed, and settled by an operator's verdict, audited.

use reward_service::claim::Claims;

use super::Control;
use super::error::{ControlError, failed};

impl Control {
    /// Every grant held in doubt (see `reward_service::grant`), oldest first.
    pub async fn in_doubt(&self) -> Result<Vec<reward_service::claim::Doubt>, ControlError> {
        let claims = Claims::connect(&self.redis_url, self.known.claims.clone())
            .await
            .map_err(failed)?;
        claims.in_doubt().await.map_err(failed)
    }

    /// An operator's verdict on an in-doubt grant, after checking the downstream:
    /// `Some(receipt)` records it credited; `None` lets the next delivery credit it.
    /// Refused when the trade number is not in doubt. Audited.
    pub async fn settle(&self, trade_no: &str, receipt: Option<&str>) -> Result<(), ControlError> {
        let claims = Claims::connect(&self.redis_url, self.known.claims.clone())
            .await
            .map_err(failed)?;
        let settled = claims
            .settle_doubt(trade_no, receipt)
            .await
            .map_err(|e| match e {
                e @ reward_service::claim::ClaimError::Invalid(_) => {
                    ControlError::Refused(e.to_string())
                }
                other => failed(other),
            })?;
        if !settled {
            return Err(ControlError::Refused(format!(
                "{trade_no} is not held in doubt (see `reward-ctl in-doubt`)"
            )));
        }
        self.audit(
            &format!("in-doubt:{trade_no}"),
            Some(reward_service::claim::ClaimState::InDoubt.as_str().into()),
            Some(match receipt {
                Some(r) => format!("GRANTED {r}"),
                None => "NOT_CREDITED (to be credited)".into(),
            }),
        )
        .await
    }
}
