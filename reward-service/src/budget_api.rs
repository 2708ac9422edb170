//! The operators' gRPC API, `reward.v1.BudgetAdmin` (`proto/reward/v1/admin.proto`):
//! read and set any scene's budget over the network, behind the admin credential,
//! every change written to the change trail ([`crate::trail`]). `reward-ctl budget
//! --service` is its client, so managing a budget needs neither the service's config
//! file nor Redis access.
//!
//! Setting goes through [`crate::claim::Claims::set_budget`] (exact: the scene's shards
//! are held while their spending is read; never below it). A scene need not be in the
//! config's `[budgets]`: those are start-up values only.

use proto::v1::budget_admin_server::{BudgetAdmin, BudgetAdminServer};
use proto::v1::{BudgetState, GetBudgetRequest, SetBudgetRequest, SetBudgetResponse};
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status};

use crate::claim::{ClaimError, Claims};
use crate::grpc::Auth;
use crate::trail::TrailEntry;
use reward_runtime::credential::Credential;

/// Longest `SetBudgetRequest.reason`, in bytes.
pub const MAX_REASON_LEN: usize = 256;

/// The tonic service.
#[derive(Debug, Clone)]
pub struct BudgetApi {
    claims: Claims,
    trail_key: String,
}

/// The admin API behind the admin credential (`None`: every call refused).
pub fn server(
    claims: Claims,
    trail_key: String,
    credential: Option<Credential>,
) -> InterceptedService<BudgetAdminServer<BudgetApi>, Auth> {
    InterceptedService::new(
        BudgetAdminServer::new(BudgetApi { claims, trail_key }),
        Auth::optional(credential),
    )
}

/// `activity/scene`, both ids checked.
fn scene_of(activity_id: &str, scene_id: &str) -> Result<String, Status> {
    for (what, id) in [("activity_id", activity_id), ("scene_id", scene_id)] {
        proto::ids::check_id(id, proto::limits::MAX_ID_LEN)
            .map_err(|p| Status::invalid_argument(format!("{what} {p}")))?;
    }
    Ok(format!("{activity_id}/{scene_id}"))
}

fn status(e: ClaimError) -> Status {
    match e {
        e @ ClaimError::Invalid(_) => Status::invalid_argument(e.to_string()),
        e @ ClaimError::BelowSpent { .. } => Status::failed_precondition(e.to_string()),
        e @ ClaimError::BudgetBusy(_) => Status::aborted(e.to_string()),
        e => Status::unavailable(e.to_string()),
    }
}

impl BudgetApi {
    async fn state(&self, activity_id: &str, scene_id: &str) -> Result<BudgetState, Status> {
        let scene = scene_of(activity_id, scene_id)?;
        let (total, spent) = self.claims.budget_state(&scene).await.map_err(status)?;
        Ok(BudgetState {
            activity_id: activity_id.to_string(),
            scene_id: scene_id.to_string(),
            configured: total.is_some(),
            total: total.unwrap_or(0),
            spent,
            remaining: total.unwrap_or(0).saturating_sub(spent).max(0),
        })
    }

    /// Adds a budget change to the trail.
    async fn trail(
        &self,
        who: &str,
        scene: &str,
        old: Option<i64>,
        new: String,
    ) -> Result<(), fred::error::Error> {
        let e = TrailEntry {
            at_unix_ms: reward_runtime::clock::now_ms(),
            who: who.to_string(),
            key: format!("budget:{scene}"),
            old: old.map(|o| o.to_string()),
            new: Some(new),
        };
        crate::trail::record(self.claims.pool().next(), &self.trail_key, &e)
            .await
            .map(|_| ())
    }

    /// The change's outcome on the trail, after the entry that asked for it (best
    /// effort: that entry says "(requested)", so a missing outcome reads as unknown,
    /// never as done).
    async fn trail_outcome(&self, who: &str, scene: &str, old: Option<i64>, outcome: String) {
        if let Err(err) = self.trail(who, scene, old, outcome).await {
            tracing::error!(error = %err, scene, "a budget change's outcome is not on the change trail");
        }
    }
}

#[tonic::async_trait]
impl BudgetAdmin for BudgetApi {
    async fn get_budget(
        &self,
        req: Request<GetBudgetRequest>,
    ) -> Result<Response<BudgetState>, Status> {
        let r = req.into_inner();
        Ok(Response::new(
            self.state(&r.activity_id, &r.scene_id).await?,
        ))
    }

    async fn set_budget(
        &self,
        req: Request<SetBudgetRequest>,
    ) -> Result<Response<SetBudgetResponse>, Status> {
        let peer = req
            .remote_addr()
            .map_or_else(|| "unknown".to_string(), |a| a.to_string());
        let r = req.into_inner();
        let scene = scene_of(&r.activity_id, &r.scene_id)?;
        if !(0..=crate::claim::MAX_AMOUNT).contains(&r.total) {
            return Err(Status::invalid_argument(format!(
                "total {} is outside 0..=2^53-1",
                r.total
            )));
        }
        // Control characters, and the Unicode ones that reorder or break lines, would
        // let a reason forge how the trail reads.
        let tricky = |c: char| {
            c.is_control()
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        };
        if r.reason.len() > MAX_REASON_LEN || r.reason.chars().any(tricky) {
            return Err(Status::invalid_argument(format!(
                "reason: at most {MAX_REASON_LEN} bytes, no control characters"
            )));
        }
        let before = self.state(&r.activity_id, &r.scene_id).await?;
        let old = before.configured.then_some(before.total);
        let who = if r.reason.is_empty() {
            format!("api {peer}")
        } else {
            format!("api {peer}: {}", r.reason)
        };
        // On the trail before it is applied: a change the trail cannot record is not
        // made, and one that fails midway is on record with its outcome.
        self.trail(&who, &scene, old, format!("{} (requested)", r.total))
            .await
            .map_err(|err| {
                Status::unavailable(format!(
                    "the change trail could not be written, so nothing was changed: {err}"
                ))
            })?;
        let spent = match self.claims.set_budget(&scene, r.total).await {
            Ok(spent) => spent,
            Err(e @ ClaimError::BudgetPartial { .. }) => {
                // Some shards took the new caps.
                self.trail_outcome(&who, &scene, old, format!("{} (partial: {e})", r.total))
                    .await;
                return Err(Status::unavailable(e.to_string()));
            }
            Err(e) => {
                self.trail_outcome(&who, &scene, old, format!("{} (not applied: {e})", r.total))
                    .await;
                return Err(status(e));
            }
        };
        self.trail_outcome(&who, &scene, old, r.total.to_string())
            .await;
        tracing::info!(scene, from = before.total, to = r.total, %peer, "budget set over the admin API");
        // The change is made: a failed read now must not answer as if it were not.
        let after = match self.state(&r.activity_id, &r.scene_id).await {
            Ok(a) => a,
            Err(_) => BudgetState {
                configured: true,
                total: r.total,
                spent,
                remaining: r.total.saturating_sub(spent).max(0),
                ..before.clone()
            },
        };
        Ok(Response::new(SetBudgetResponse {
            before: Some(before),
            after: Some(after),
        }))
    }
}
