//! The pipeline's one call to the reward service, `GrantBatch`, behind a trait: the
//! running consumer uses the tonic client ([`TonicGrant`]); the unit tests answer
//! from memory, so the retry loop and the settling of every outcome run with no
//! service up.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use proto::v1::reward_service_client::RewardServiceClient;
use proto::v1::{GrantBatchRequest, GrantBatchResponse, GrantResult, RewardEvent};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;

use super::stats::Stats;

/// How often one GrantBatch is sent before its events are parked for a retry.
pub(super) const GRANT_ATTEMPTS: u32 = 3;

/// The wait before GrantBatch attempt `attempt + 1`: 500 ms times the attempt number,
/// with ±50 % jitter so many consumers that failed together do not come back together.
pub(super) fn grant_backoff(attempt: u32) -> Duration {
    let base = 500 * u64::from(attempt + 1);
    Duration::from_millis(base / 2 + rand::random_range(0..=base))
}

/// A boxed future, for the trait's object safety.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Something that answers `GrantBatch`.
pub trait GrantClient: Send + Sync + fmt::Debug {
    /// One call: the results, one per event, or the call's error status.
    fn grant_batch(
        &self,
        req: tonic::Request<GrantBatchRequest>,
    ) -> BoxFuture<'_, Result<GrantBatchResponse, tonic::Status>>;
}

/// The reward service over gRPC (one endpoint or a balanced list).
#[derive(Debug, Clone)]
pub struct TonicGrant(pub RewardServiceClient<Channel>);

impl GrantClient for TonicGrant {
    fn grant_batch(
        &self,
        req: tonic::Request<GrantBatchRequest>,
    ) -> BoxFuture<'_, Result<GrantBatchResponse, tonic::Status>> {
        let mut client = self.0.clone();
        Box::pin(async move { client.grant_batch(req).await.map(|r| r.into_inner()) })
    }
}

/// Calls `GrantBatch` for `events`, up to [`GRANT_ATTEMPTS`] times with
/// [`grant_backoff`] between attempts (not again after `InvalidArgument` or
/// `Unauthenticated`, which a retry would only repeat), and pairs the answer with the
/// events: each event gets the result in its place if that result names its trade
/// number, else `None` (no answer, which the settling retries).
pub(super) async fn grant_answers(
    client: &dyn GrantClient,
    events: &[&RewardEvent],
    auth: &MetadataValue<Ascii>,
    timeout: Duration,
    stats: &Stats,
) -> Vec<Option<GrantResult>> {
    let mut answer = None;
    for attempt in 0..GRANT_ATTEMPTS {
        // The events are copied into each attempt's request (once, normally).
        // Read off a topic: the service credits only events that prove they were
        // issued by a holder of the token keys.
        let mut req = tonic::Request::new(GrantBatchRequest {
            events: events.iter().map(|e| (*e).clone()).collect(),
            require_proof: true,
        });
        req.metadata_mut().insert("authorization", auth.clone());
        req.set_timeout(timeout);
        match client.grant_batch(req).await {
            Ok(resp) => {
                answer = Some(resp.results);
                break;
            }
            Err(status) => {
                stats.service_error();
                tracing::warn!(code = ?status.code(), message = status.message(), attempt,
                    "GrantBatch failed");
                if matches!(
                    status.code(),
                    tonic::Code::InvalidArgument | tonic::Code::Unauthenticated
                ) {
                    break;
                }
                if attempt + 1 < GRANT_ATTEMPTS {
                    tokio::time::sleep(grant_backoff(attempt)).await;
                }
            }
        }
    }
    let mut results = answer.unwrap_or_default().into_iter();
    events
        .iter()
        .map(|e| results.next().filter(|r| r.trade_no == e.trade_no))
        .collect()
}
