//! The checks an event passes before any claim: its limits, its proof, its type's
//! ceiling, its age, its expiry and its type's downstream.

use proto::v1::{GrantResult, RewardEvent};
use reward_runtime::clock::now_ms;
use sdk::token::proof::ProofError;

use super::event::{expired, grant_of};
use super::handle::Service;
use super::proofs::Proofs;
use super::refusal::Refusal;
use super::results::result_of;
use crate::claim::Grant;
use crate::grant::GrantError;

impl Service {
    /// Whether `ev` proves itself as `proofs` asks; `Ok` also for an unproven event
    /// inside an `accept` window (counted).
    pub(super) fn proven(&self, ev: &RewardEvent, proofs: Proofs, now: i64) -> Result<(), Refusal> {
        if proofs == Proofs::Vouched {
            return Ok(());
        }
        match self.sdk.codec().proofs().verify(ev) {
            Ok(_) => Ok(()),
            Err(ProofError::Missing)
                if self
                    .inner
                    .events
                    .accept_unproven_until_ms
                    .is_some_and(|until| now < until) =>
            {
                metrics::counter!("reward_service_events_unproven_accepted_total").increment(1);
                Ok(())
            }
            Err(e) => Err(Refusal {
                code: e.as_code(),
                why: e.to_string(),
            }),
        }
    }

    /// The checks before any claim that need no Redis, in order: the limits
    /// ([`grant_of`]), the proof (when `proofs` asks), the type's amount ceiling, and
    /// the event's age: an event older than the claim store keeps records (a topic
    /// replayed, a consumer far behind) could find its record gone and be credited
    /// again, so it is refused. The reward's expiry and its type's downstream are [`Service::admitted`]'s.
    pub(super) fn checked(&self, ev: &RewardEvent, proofs: Proofs) -> Result<Grant, Refusal> {
        let g = grant_of(ev).map_err(Refusal::invalid)?;
        let now = now_ms();
        self.proven(ev, proofs, now).inspect_err(|r| {
            metrics::counter!("reward_service_events_refused_total", "code" => r.code).increment(1);
        })?;
        proto::limits::check_created(ev, now).map_err(|e| Refusal::invalid(e.to_string()))?;
        self.granter.check_ceiling(&g).map_err(Refusal::invalid)?;
        let retention_ms = i64::try_from(self.granter.claims().config().retention_secs)
            .unwrap_or(i64::MAX)
            .saturating_mul(1000);
        if now >= ev.created_at_ms.saturating_add(retention_ms) {
            return Err(Refusal::invalid(format!(
                "the event was created at {} (Unix ms), longer ago than grant records are kept",
                ev.created_at_ms
            )));
        }
        Ok(g)
    }

    /// `None` when the reward may go on. A reward past its expiry, or of a reward type
    /// no downstream is configured for, starts nothing: it is refused (`EXPIRED`,
    /// `UNKNOWN_REWARD_TYPE`) with no record written, so its trade number stays free
    /// and the corrected request (or the same one once the type is configured) is
    /// credited. Either goes on when its trade number was already claimed (a claim
    /// made while it was valid is finished whatever changed since: its budget is taken
    /// and a credit may have happened; the granter holds a claimed grant whose type
    /// lost its downstream for an operator). Otherwise the answer: the refusal, or a
    /// store failure.
    pub(super) async fn admitted(&self, g: &Grant, expires_at_ms: i64) -> Option<GrantResult> {
        let refusal = if expired(expires_at_ms, now_ms()) {
            Refusal {
                code: "EXPIRED",
                why: format!("the reward expired at {expires_at_ms} (Unix ms)"),
            }
        } else if !self.granter.knows_type(&g.reward_type) {
            Refusal {
                code: "UNKNOWN_REWARD_TYPE",
                why: format!(
                    "no downstream is configured for reward type {:?}; nothing was recorded: send it again with a configured type",
                    g.reward_type
                ),
            }
        } else {
            return None;
        };
        match self.granter.claims().record(&g.trade_no).await {
            Ok(Some(_)) => None,
            Ok(None) => {
                metrics::counter!("reward_service_events_refused_total", "code" => refusal.code)
                    .increment(1);
                Some(refusal.result(&g.trade_no))
            }
            Err(e) => Some(result_of(&g.trade_no, Err(GrantError::Claim(e)))),
        }
    }
}
