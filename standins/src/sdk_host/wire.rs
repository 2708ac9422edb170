//! The pipe between the parent and a host: one JSON line a request, one a reply.

use std::collections::BTreeMap;

use sdk::request::{RewardRequest, User};
use serde::{Deserialize, Serialize};

use super::outcome::HostStats;

/// One request, parent to host.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireRequest {
    pub id: u64,
    pub trade_no: String,
    pub user_id: String,
    pub device_id: String,
    pub app_id: String,
    pub activity_id: String,
    pub scene_id: String,
    pub reward_type: String,
    pub amount: i64,
    pub description: String,
    pub extension: BTreeMap<String, String>,
}

impl WireRequest {
    pub fn new(id: u64, r: RewardRequest) -> Self {
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

    pub fn into_request(self) -> (u64, RewardRequest) {
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
pub enum FromHost {
    /// A call's answer: no refusal means accepted; `stored` says whether the answer
    /// came after Redis held the token ([`sdk::Stored::Yes`]); `held_by` which store
    /// held the reward then ([`sdk::HeldBy::label`]: `stored`, `queued`, `spooled`,
    /// `none`). A reward held by any store must survive the host's death (its token
    /// may not, when only the queue or the spool held it); one answered before
    /// anything held it may not.
    Answer {
        id: u64,
        refusal: Option<String>,
        stored: bool,
        #[serde(default)]
        held_by: String,
    },
    /// The counters, every second.
    Stats(HostStats),
    /// The host closed its SDK (every event delivered or spooled): its last counters.
    Closed(HostStats),
}
