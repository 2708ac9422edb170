//! A scene's budget, set exactly against what it has spent, audited.

use reward_service::claim::Claims;

use super::error::{ControlError, failed};
use super::{Control, Known};

impl Control {
    /// Sets a scene's total budget; refused for an unknown scene or below what it has
    /// spent. Returns (old total, spent).
    pub async fn budget(&self, scene: &str, total: i64) -> Result<(i64, i64), ControlError> {
        if !self.known.scenes.contains(scene) {
            return Err(ControlError::Refused(format!(
                "unknown scene {scene:?} (budgets configured: {})",
                Known::known_list(&self.known.scenes)
            )));
        }
        if total < 0 {
            return Err(ControlError::Refused(format!(
                "budget {total}: must be >= 0"
            )));
        }
        let claims = Claims::connect(&self.redis_url, self.known.claims.clone())
            .await
            .map_err(failed)?;
        let old = claims.budget(scene).await.map_err(failed)?;
        // Exact: the scene's shards are held while their spending is read, and a total
        // below it is refused (`Claims::set_budget`).
        let spent = match claims.set_budget(scene, total).await {
            Err(e @ reward_service::claim::ClaimError::BudgetPartial { .. }) => {
                // Some shards took the new caps: on the record, then told.
                self.audit(
                    &format!("budget:{scene}"),
                    Some(old.to_string()),
                    Some(format!("{total} (partial: {e})")),
                )
                .await?;
                return Err(ControlError::Refused(e.to_string()));
            }
            other => other,
        }
        .map_err(|e| match e {
            e @ (reward_service::claim::ClaimError::BelowSpent { .. }
            | reward_service::claim::ClaimError::BudgetBusy(_)
            | reward_service::claim::ClaimError::Invalid(_)) => {
                ControlError::Refused(e.to_string())
            }
            other => failed(other),
        })?;
        self.audit(
            &format!("budget:{scene}"),
            Some(old.to_string()),
            Some(total.to_string()),
        )
        .await?;
        Ok((old, spent))
    }
}
