//! The pipe between the parent and a host: one JSON line a request, one a reply.

use std::collections::BTreeMap;

use sdk::request::{RewardRequest, User};
use serde::{Deserialize, Serialize};

use super::outcome::HostStats;

/// One request, parent to host.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct WireRequest {
    pub(super) id: u64,
    pub(super) trade_no: String,
    pub(super) user_id: String,
    pub(super) device_id: String,
    pub(super) app_id: String,
    pub(super) activity_id: String,
    pub(super) scene_id: String,
    pub(super) reward_type: String,
    pub(super) amount: i64,
    pub(super) description: String,
    pub(super) extension: BTreeMap<String, String>,
}

impl WireRequest {
    pub(super) fn new(id: u64, r: RewardRequest) -> Self {
        Self {
            id,
            trade_no: r.trade_no,
            user_id: r.user.user_id,
            device_id: r.user.device_id,
            app_id: r.user.app_id,
            activity_id: r.activity_id,
            scene_id: r.scene_id,
            reward_type: r.reward_type,
            amount: r.amount,
            description: r.description,
            extension: r.extension,
        }
    }

    pub(super) fn into_request(self) -> (u64, RewardRequest) {
        let r = RewardRequest {
            trade_no: self.trade_no,
            user: User {
                user_id: self.user_id,
                device_id: self.device_id,
                app_id: self.app_id,
            },
            activity_id: self.activity_id,
            scene_id: self.scene_id,
            reward_type: self.reward_type,
            amount: self.amount,
            description: self.description,
            extension: self.extension,
        };
        (self.id, r)
    }
}

/// One line, host to parent.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum FromHost {
    /// A call's answer: no refusal means accepted.
    Answer { id: u64, refusal: Option<String> },
    /// The counters, every second.
    Stats(HostStats),
    /// The host closed its SDK (every event delivered or spooled): its last counters.
    Closed(HostStats),
}
