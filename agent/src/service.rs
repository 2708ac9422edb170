//! `reward.v1.RewardAgent` over the SDK: each reward is one
//! [`sdk::Sdk::send_reward`], a batch is its rewards sent at once, and a refusal is a
//! typed reply ([`crate::refusal`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use proto::v1::reward_agent_server::RewardAgent;
use proto::v1::send_reward_reply::Result as Answer;
use proto::v1::{
    AgentHealthReply, AgentHealthRequest, HeldBy, IssuedReward, SendRewardReply, SendRewardRequest,
    SendRewardsReply, SendRewardsRequest,
};
use sdk::request::{RewardRequest, User};
use tonic::{Request, Response, Status};

use crate::refusal;

/// What every reward the agent answered is counted under
/// (`reward_agent_rewards_total{outcome}`, in `reward_runtime::catalogue`): `issued`,
/// or the refusal's label.
pub const REWARDS_METRIC: &str = "reward_agent_rewards_total";

/// The agent's gRPC service.
#[derive(Debug, Clone)]
pub struct AgentService {
    sdk: Arc<sdk::Sdk>,
    draining: Arc<AtomicBool>,
    max_batch: usize,
}

impl AgentService {
    /// Serves `sdk`; once `draining` is set every reward is refused `CLOSING`.
    pub fn new(sdk: Arc<sdk::Sdk>, draining: Arc<AtomicBool>, max_batch: usize) -> Self {
        Self {
            sdk,
            draining,
            max_batch,
        }
    }

    /// Sends one reward, answering `issued` or a typed refusal.
    async fn one(&self, r: SendRewardRequest) -> SendRewardReply {
        let answer = if self.draining.load(Ordering::Acquire) {
            Answer::Error(refusal::closing())
        } else {
            match self.sdk.send_reward(request_of(r)).await {
                Ok(t) => Answer::Issued(IssuedReward {
                    token: t.token,
                    trade_no: t.trade_no,
                    queue: t.queue,
                    held_by: held_by(t.held_by).into(),
                }),
                Err(e) => Answer::Error(refusal::of(&e)),
            }
        };
        let outcome = match &answer {
            Answer::Issued(_) => "issued",
            Answer::Error(e) => refusal::label(e.code()),
        };
        metrics::counter!(REWARDS_METRIC, "outcome" => outcome).increment(1);
        SendRewardReply {
            result: Some(answer),
        }
    }
}

/// The SDK's request for a reward as the agent received it.
fn request_of(r: SendRewardRequest) -> RewardRequest {
    let user = r.user.unwrap_or_default();
    RewardRequest {
        trade_no: r.trade_no,
        user: User {
            user_id: user.user_id,
            device_id: user.device_id,
            app_id: user.app_id,
        },
        activity_id: r.activity_id,
        scene_id: r.scene_id,
        reward_type: r.reward_type,
        amount: r.amount,
        description: r.description,
        extension: r.extension.into_iter().collect(),
    }
}

fn held_by(h: sdk::HeldBy) -> HeldBy {
    match h {
        sdk::HeldBy::Store => HeldBy::Store,
        sdk::HeldBy::Queue => HeldBy::Queue,
        sdk::HeldBy::Spool => HeldBy::Spool,
        // Only the opt-in modes that answer before a write lands (deferred, batched
        // after a failed attempt), which an agent's config may choose.
        sdk::HeldBy::Nothing => HeldBy::Unspecified,
    }
}

#[tonic::async_trait]
impl RewardAgent for AgentService {
    async fn send_reward(
        &self,
        request: Request<SendRewardRequest>,
    ) -> Result<Response<SendRewardReply>, Status> {
        // On a task of its own: a caller that goes away (its deadline) does not cut
        // the call between its token write and its event.
        let this = self.clone();
        let reply = tokio::spawn(async move { this.one(request.into_inner()).await })
            .await
            .map_err(|e| Status::internal(format!("the send task failed: {e}")))?;
        Ok(Response::new(reply))
    }

    async fn send_rewards(
        &self,
        request: Request<SendRewardsRequest>,
    ) -> Result<Response<SendRewardsReply>, Status> {
        let rewards = request.into_inner().rewards;
        if rewards.len() > self.max_batch {
            return Err(Status::invalid_argument(format!(
                "a batch holds at most {} rewards, this one {}",
                self.max_batch,
                rewards.len()
            )));
        }
        let this = self.clone();
        let replies = tokio::spawn(async move {
            futures_util::future::join_all(rewards.into_iter().map(|r| this.one(r))).await
        })
        .await
        .map_err(|e| Status::internal(format!("the batch task failed: {e}")))?;
        Ok(Response::new(SendRewardsReply { replies }))
    }

    async fn health(
        &self,
        _request: Request<AgentHealthRequest>,
    ) -> Result<Response<AgentHealthReply>, Status> {
        Ok(Response::new(AgentHealthReply {
            serving: !self.draining.load(Ordering::Acquire),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }))
    }
}
