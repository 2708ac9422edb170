//! What happens to a message once the service answered (or did not): done, retried
//! after a backoff, parked in the delay queue, requeued at once, or written to the
//! dead-letter or failure topic.

use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use prost::Message as _;
use proto::v1::{DeadLetter, GrantOutcome, GrantResult, RewardEvent};
use sdk::Sdk;
use sdk::queue::Settled;

use reward_runtime::clock::now_ms;

use crate::config::PipelineConfig;

use super::handler::Pipeline;
use super::item::{Item, Park, Ready};
use super::stats::{LastResort, Requeue};
use proto::reasons::DeadLetterReason;

/// Where one event ends once the service answered (or did not): the decision of
/// [`Pipeline::settle`], apart from its carrying out, so the unit tests can check it
/// for every outcome without Redis or a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Fate {
    /// Settled for good: its offset may be marked.
    Done(Done),
    /// Parked for another attempt: `retry_count` is the event's new count, `delay`
    /// the wait (the backoff, or the service's `retry_after_ms` if longer).
    Retry {
        /// The event's retry count from now on.
        retry_count: u32,
        /// How long it stays parked (before the `MAX_PARK` cap).
        delay: Duration,
    },
    /// Written to the dead-letter or failure topic (by the reason), then done.
    Letter {
        /// Why.
        reason: DeadLetterReason,
        /// The service's error code (or the outcome's name).
        code: String,
    },
}

/// How a [`Fate::Done`] event was settled (each has its own count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Done {
    Granted,
    Duplicate,
    InDoubt,
    FailedPermanent,
}

/// The fate of `event` given its result (`None`: no answer for it).
pub(super) fn fate(cfg: &PipelineConfig, event: &RewardEvent, result: Option<GrantResult>) -> Fate {
    let Some(r) = result else {
        return retry_fate(cfg, event, "SERVICE_UNAVAILABLE", Duration::ZERO);
    };
    let outcome = GrantOutcome::try_from(r.outcome).unwrap_or(GrantOutcome::Unspecified);
    match outcome {
        GrantOutcome::Granted | GrantOutcome::Accepted => Fate::Done(Done::Granted),
        GrantOutcome::Duplicate => Fate::Done(Done::Duplicate),
        // Held for an operator by the service (its record lists it): retrying
        // would only be answered the same.
        GrantOutcome::InDoubt => Fate::Done(Done::InDoubt),
        // The service already wrote it to the failure topic (once, by the claim's owner).
        GrantOutcome::FailedPermanent => Fate::Done(Done::FailedPermanent),
        GrantOutcome::Conflict | GrantOutcome::Invalid | GrantOutcome::BudgetExhausted => {
            // Classified by the error code, never by the message.
            let reason = match (outcome, r.error_code.as_str()) {
                (GrantOutcome::Conflict, _) => DeadLetterReason::Conflict,
                (GrantOutcome::Invalid, "EXPIRED") => DeadLetterReason::Expired,
                (GrantOutcome::Invalid, code) if code.starts_with("PROOF_") => {
                    DeadLetterReason::Unproven
                }
                (GrantOutcome::Invalid, _) => DeadLetterReason::Invalid,
                _ => DeadLetterReason::BudgetExhausted,
            };
            Fate::Letter {
                reason,
                code: r.error_code,
            }
        }
        GrantOutcome::FailedRetryable | GrantOutcome::RetryLater | GrantOutcome::Unspecified => {
            let after = Duration::from_millis(u64::try_from(r.retry_after_ms).unwrap_or(0));
            let code = if r.error_code.is_empty() {
                outcome.as_str_name().to_string()
            } else {
                r.error_code
            };
            retry_fate(cfg, event, &code, after)
        }
    }
}

/// A failure a retry can fix: parked with `retry_count + 1`, or a dead letter past
/// the maximum.
fn retry_fate(cfg: &PipelineConfig, event: &RewardEvent, code: &str, after: Duration) -> Fate {
    let next = event.retry_count.saturating_add(1);
    if next > cfg.max_retries {
        return Fate::Letter {
            reason: DeadLetterReason::MaxRetries,
            code: code.to_string(),
        };
    }
    Fate::Retry {
        retry_count: next,
        delay: cfg.backoff(next).max(after),
    }
}

impl Pipeline {
    /// Carries out the [`fate`] of one event: counts it and marks it done, parks it,
    /// or writes its letter.
    pub(super) async fn settle(&self, ready: Ready, result: Option<GrantResult>) {
        let stats = &self.inner.stats;
        match fate(&self.inner.cfg, &ready.event, result) {
            Fate::Done(how) => {
                match how {
                    Done::Granted => stats.granted(&ready.event.reward_type),
                    Done::Duplicate => stats.duplicate(),
                    Done::InDoubt => {
                        stats.in_doubt();
                        tracing::warn!(trade_no = %ready.event.trade_no, "grant held in doubt for an operator");
                    }
                    Done::FailedPermanent => stats.failed_permanent(),
                }
                self.done(&ready.item.ack);
            }
            Fate::Letter { reason, code } => {
                let me = self.clone();
                let Ready { item, event } = ready;
                self.side(async move {
                    me.dead_letter(Some(event), item, reason, &code).await;
                });
            }
            Fate::Retry { retry_count, delay } => {
                let mut ready = ready;
                ready.event.retry_count = retry_count;
                self.park_later(ready, Park::Failed, Some(delay)).await;
            }
        }
    }

    pub(super) async fn park_later(&self, ready: Ready, why: Park, after: Option<Duration>) {
        let cfg = &self.inner.cfg;
        // Never further ahead than a consumer takes an event back (a service's
        // `retry_after_ms` is not bounded by this config).
        let delay = after
            .unwrap_or(match why {
                Park::Limited => Duration::from_millis(cfg.limited_delay_ms),
                _ => Duration::from_millis(cfg.fused_delay_ms),
            })
            .min(MAX_PARK);
        let due = now_ms().saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
        // Waiting for a side permit here is the dispatcher's back-pressure when Redis
        // is slow; the task itself runs concurrently.
        let permit = self.inner.side.clone().acquire_owned().await.ok();
        let me = self.clone();
        self.side_with(permit, async move {
            me.park(ready, why, due).await;
        });
    }

    /// Parks a message until `due`, then marks it done.
    pub(super) async fn park(&self, mut ready: Ready, why: Park, due: i64) {
        let stats = &self.inner.stats;
        ready.event.not_before_ms = due;
        let encoded = Bytes::from(ready.event.encode_to_vec());
        let parked = self
            .inner
            .delay
            .park(
                &ready.event.reward_type,
                &ready.event.trade_no,
                encoded.clone(),
                due,
            )
            .await;
        match parked {
            Ok(()) => {
                stats.requeued(match why {
                    Park::Failed => Requeue::Failed,
                    Park::Limited => Requeue::Limited,
                    Park::Fused => Requeue::Fused,
                    Park::Early => Requeue::Early,
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, trade_no = %ready.event.trade_no,
                    "delay queue refused a park; requeueing at once");
                self.requeue_now(&ready.event, encoded).await;
            }
        }
        self.done(&ready.item.ack);
    }

    /// Hands an event straight back to the virtual queue (every queue is tried);
    /// the last resort is the log.
    async fn requeue_now(&self, event: &RewardEvent, encoded: Bytes) {
        let key = requeue_key(event);
        let user = event.user.as_ref().map_or("", |u| u.user_id.as_str());
        if let Some(Settled::Delivered | Settled::Spooled) = queue_anywhere(
            &self.inner.sdk,
            &self.inner.cfg,
            event,
            user,
            &key,
            &encoded,
        )
        .await
        {
            self.inner.stats.requeued(Requeue::Direct);
            return;
        }
        self.last_resort(&event.trade_no, &encoded, LastResort::Requeue);
    }

    fn last_resort(&self, trade_no: &str, payload: &[u8], what: LastResort) {
        self.inner.stats.last_resort(what);
        let what = what.label();
        tracing::error!(
            trade_no,
            what,
            payload_b64 = %base64::engine::general_purpose::STANDARD.encode(payload),
            "no queue took this message; logged for manual replay"
        );
    }

    /// Writes a dead letter (or failure record) and marks the message done.
    pub(super) async fn dead_letter(
        &self,
        event: Option<RewardEvent>,
        item: Item,
        reason: DeadLetterReason,
        code: &str,
    ) {
        let (queue, other) = if reason.is_dead_letter() {
            (
                &self.inner.cfg.dead_letter_queue,
                &self.inner.cfg.failure_queue,
            )
        } else {
            (
                &self.inner.cfg.failure_queue,
                &self.inner.cfg.dead_letter_queue,
            )
        };
        let trade_no = event.as_ref().map(|e| e.trade_no.clone());
        let user = event
            .as_ref()
            .and_then(|e| e.user.as_ref())
            .map(|u| u.user_id.clone())
            .unwrap_or_default();
        let key = trade_no.clone().unwrap_or_else(|| {
            format!(
                "{}:{}:{}",
                item.ack.part.0, item.ack.part.1, item.ack.offset
            )
        });
        // A record near the broker's size limit, wrapped in a letter, could pass it and
        // be refused: its raw bytes are cut (the letter says how long it was).
        let (raw, code) = if item.raw.len() > MAX_DEAD_RAW {
            (
                item.raw[..MAX_DEAD_RAW].to_vec(),
                format!(
                    "{code} (raw cut to its first {MAX_DEAD_RAW} of {} bytes)",
                    item.raw.len()
                ),
            )
        } else {
            (item.raw.to_vec(), code.to_string())
        };
        let letter = DeadLetter {
            event,
            raw,
            reason: reason.as_str().to_string(),
            error_code: code,
            source_topic: item.ack.part.0.to_string(),
            dead_at_ms: now_ms(),
        };
        let payload = Bytes::from(letter.encode_to_vec());
        let mut settled = false;
        for q in [queue, other] {
            match self
                .inner
                .sdk
                .enqueue_confirmed(Some(q), None, &user, key.clone(), payload.clone())
                .await
            {
                Ok((_, rx)) => {
                    // Logged by the SDK already if neither broker nor spool took it.
                    settled = matches!(rx.await, Ok(Settled::Delivered | Settled::Spooled));
                    if !settled {
                        self.inner.stats.last_resort(LastResort::DeadLetter);
                        settled = true;
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(queue = %q, error = %e, "dead-letter queue refused; trying the other");
                }
            }
        }
        if settled {
            self.inner.stats.lettered(reason);
        } else {
            self.last_resort(
                trade_no.as_deref().unwrap_or(""),
                &payload,
                LastResort::DeadLetter,
            );
        }
        self.done(&item.ack);
    }
}

/// The most raw bytes a dead letter keeps (512 KiB): half of Kafka's default record
/// limit, so the letter around them always fits where the record came from.
pub(super) const MAX_DEAD_RAW: usize = 512 << 10;

/// The longest park: the furthest ahead an event's `not_before_ms` may lie when a
/// consumer reads it (`proto::limits::MAX_NOT_BEFORE_AHEAD_MS`), less a minute for
/// clocks that disagree.
pub(super) const MAX_PARK: Duration =
    Duration::from_millis(proto::limits::MAX_NOT_BEFORE_AHEAD_MS.unsigned_abs() - 60_000);

/// The partition key of a requeued event: `{trade_no}{retry_count}`.
pub fn requeue_key(event: &RewardEvent) -> String {
    format!("{}{}", event.trade_no, event.retry_count)
}

/// Queues an encoded event: its type's queue first, then every other queue but the
/// dead-letter and failure ones; answers how it settled (`None`: no queue took it).
pub async fn queue_anywhere(
    sdk: &Sdk,
    cfg: &PipelineConfig,
    event: &RewardEvent,
    user: &str,
    key: &str,
    encoded: &Bytes,
) -> Option<Settled> {
    let routing = sdk.routing();
    let first = routing
        .route(&event.reward_type)
        .map_or(routing.default_queue.clone(), |(q, _)| q.to_string());
    let mut order = vec![first.clone()];
    order.extend(
        routing
            .queues
            .keys()
            .filter(|q| **q != first && **q != cfg.dead_letter_queue && **q != cfg.failure_queue)
            .cloned(),
    );
    for q in order {
        match sdk
            .enqueue_confirmed(Some(&q), None, user, key.to_string(), encoded.clone())
            .await
        {
            Ok((_, rx)) => match rx.await {
                Ok(s @ (Settled::Delivered | Settled::Spooled)) => return Some(s),
                _ => continue,
            },
            Err(e) => {
                tracing::warn!(queue = %q, error = %e, "queue refused a requeue; trying the next");
            }
        }
    }
    None
}
