//! Where a grant that failed for good is recorded: the failure archive (JSON lines,
//! appended and fsynced) and the failure topic (the SDK's virtual queue).

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use prost::Message as _;
use proto::v1::{DeadLetter, RewardEvent, UserInfo};
use reward_runtime::clock::now_ms;

use super::error::GrantError;
use super::granter::Granter;
use crate::claim::Grant;
use crate::downstream::CreditError;

/// Failures that reached the archive but not the failure topic, since start.
static FAILURE_TOPIC_MISSES: AtomicU64 = AtomicU64::new(0);

/// Permanent failures the failure topic did not take (they are in the archive).
pub fn failure_topic_misses() -> u64 {
    FAILURE_TOPIC_MISSES.load(Ordering::Relaxed)
}

impl Granter {
    /// Sends the failure to the failure topic. The SDK's queue takes it unless it is
    /// closing or full past its wait; then the archive (already written) is the record
    /// and the miss is logged and counted.
    pub(super) async fn publish_failure(&self, g: &Grant, e: &CreditError) {
        let Some(topic) = &self.failures else {
            return;
        };
        let letter = DeadLetter {
            event: Some(RewardEvent {
                trade_no: g.trade_no.clone(),
                user: Some(UserInfo {
                    user_id: g.user_id.clone(),
                    ..Default::default()
                }),
                activity_id: g.activity_id.clone(),
                scene_id: g.scene.clone(),
                reward_type: g.reward_type.clone(),
                amount: g.amount,
                ..Default::default()
            }),
            raw: Vec::new(),
            reason: proto::reasons::DeadLetterReason::Permanent.as_str().into(),
            error_code: e.code.as_str().into(),
            source_topic: String::new(),
            dead_at_ms: now_ms(),
        };
        let sent = topic
            .sdk
            .enqueue(
                Some(&topic.queue),
                None,
                &g.user_id,
                g.trade_no.clone(),
                Bytes::from(letter.encode_to_vec()),
            )
            .await;
        if let Err(err) = sent {
            FAILURE_TOPIC_MISSES.fetch_add(1, Ordering::Relaxed);
            tracing::error!(trade_no = %g.trade_no, error = %err, "failure not sent to the failure topic; it is in the archive");
        }
    }

    pub(super) async fn archive_failure(
        &self,
        g: &Grant,
        e: &CreditError,
    ) -> Result<(), GrantError> {
        let at_ms = now_ms();
        let record = serde_json::json!({
            "trade_no": g.trade_no,
            "scene": g.scene,
            "user_id": g.user_id,
            "reward_type": g.reward_type,
            "amount": g.amount,
            "activity_id": g.activity_id,
            "code": e.code.as_str(),
            "detail": e.detail,
            "at_ms": at_ms,
        });
        let line = format!("{record}\n");
        let path = self.archive.clone();
        let write_path = path.clone();
        let written = tokio::task::spawn_blocking(move || {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&write_path)?;
            f.write_all(line.as_bytes())?;
            f.sync_data()
        })
        .await
        .unwrap_or_else(|join| Err(std::io::Error::other(join.to_string())));
        written.map_err(|source| GrantError::Archive { path, source })
    }
}
