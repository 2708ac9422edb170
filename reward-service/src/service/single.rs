//! One event at a time: a grant now (`Grant`), or a claim now and a credit later
//! through the queue (`GrantAsync`; module doc of [`super`]).

use bytes::Bytes;
use prost::Message as _;
use proto::v1::{GrantOutcome, GrantResult, RewardEvent};

use super::handle::Service;
use super::proofs::Proofs;
use super::results::{failed, result, result_of};
use crate::grant::GrantError;

impl Service {
    /// Grants one event now.
    pub async fn grant(&self, ev: &RewardEvent) -> GrantResult {
        match self.checked(ev, Proofs::Vouched) {
            Ok(g) => match self.admitted(&g, ev.expires_at_ms).await {
                None => result_of(&g.trade_no, self.granter.grant(&g).await),
                Some(answer) => answer,
            },
            Err(r) => r.result(&ev.trade_no),
        }
    }

    /// Claims now, credits later through the queue (see the module doc). The queued
    /// event is signed by this service, so the consumer's `GrantBatch` takes it.
    pub async fn grant_async(&self, ev: &RewardEvent) -> GrantResult {
        let g = match self.checked(ev, Proofs::Vouched) {
            Ok(g) => g,
            Err(r) => return r.result(&ev.trade_no),
        };
        if let Some(answer) = self.admitted(&g, ev.expires_at_ms).await {
            return answer;
        }
        let claims = self.granter.claims();
        let (claim_id, prior) = match claims.claim(&g).await.map(crate::grant::settled) {
            Ok(Ok(claimed)) => claimed,
            Ok(Err(outcome)) => return result_of(&g.trade_no, Ok(outcome)),
            Err(e) => return result_of(&g.trade_no, Err(GrantError::Claim(e))),
        };
        // An earlier owner may have credited: keep that doubt for the consumer's
        // GrantBatch to resolve, never release it as clean.
        let released = if prior.needs_resolving() {
            claims.doubt(&g, &claim_id, 0).await
        } else {
            claims.release(&g, &claim_id).await
        };
        if let Err(e) = released {
            return result_of(&g.trade_no, Err(GrantError::Claim(e)));
        }
        let mut queued = ev.clone();
        queued.retry_count = 0;
        queued.not_before_ms = 0;
        self.sdk.codec().proofs().sign(&mut queued);
        let payload = Bytes::from(queued.encode_to_vec());
        match self
            .sdk
            .enqueue(
                None,
                Some(&g.reward_type),
                &g.user_id,
                g.trade_no.clone(),
                payload,
            )
            .await
        {
            Ok(_) => result(&g.trade_no, GrantOutcome::Accepted),
            Err(e) => GrantResult {
                retry_after_ms: 1_000,
                ..failed(
                    &g.trade_no,
                    GrantOutcome::RetryLater,
                    "QUEUE_REFUSED",
                    format!("budget held, event not queued: {e}"),
                )
            },
        }
    }
}
