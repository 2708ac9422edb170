//! The gRPC API (tonic): `Grant`, `GrantAsync`, `GrantBatch` of `reward.v1.RewardService`.
//!
//! Every call needs `authorization: Bearer <credential>` metadata (else
//! `UNAUTHENTICATED`). A request without an event, a batch of more than
//! `server.max_batch` events, or any event whose encoding is larger than
//! `proto::limits::MAX_EVENT_BYTES` is `INVALID_ARGUMENT` (the size is checked before
//! any event is looked at). A message larger than the biggest of 4 MiB,
//! `server.max_body_bytes` and `max_batch` × `MAX_EVENT_BYTES` is refused by tonic
//! (`OUT_OF_RANGE`) before it is decoded; one that does not decode is
//! `INVALID_ARGUMENT` (`proto::codec`). Everything else gets one [`proto::v1::GrantResult`] per event, whose
//! `outcome` and `error_code` say what happened (see [`crate::service::result_of`]);
//! the call itself succeeds, so one bad event never fails a batch.
//!
//! `GrantBatchRequest.require_proof` (what consumers send) makes every event prove it
//! was issued by a holder of the token keys ([`crate::service::Proofs`]); `Grant` and
//! `GrantAsync` take the caller's events on its credential.
//!
//! # A caller that goes away does not stop a grant
//! tonic drops a handler's future when its client disconnects or gives up. A grant
//! dropped after the downstream credited but before its record said `GRANTED` would
//! stay `IN_PROGRESS` until its lease ran out, and the redelivered event would then
//! be credited a second time, as when a consumer is killed mid-batch. So every handler
//! runs the grant as its own task ([`detached`]) and only waits for it: the work
//! finishes and marks its records whatever the caller does.

use proto::v1::reward_service_server::{RewardService, RewardServiceServer};
use proto::v1::{
    GrantAsyncRequest, GrantAsyncResponse, GrantBatchRequest, GrantBatchResponse, GrantRequest,
    GrantResponse,
};
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status};

use crate::service::{Proofs, Service};
use reward_runtime::credential::Credential;

/// The tonic service.
#[derive(Debug, Clone)]
pub struct GrpcApi {
    service: Service,
}

#[tonic::async_trait]
impl RewardService for GrpcApi {
    async fn grant(&self, req: Request<GrantRequest>) -> Result<Response<GrantResponse>, Status> {
        let ev = req
            .into_inner()
            .event
            .ok_or_else(|| Status::invalid_argument("GrantRequest.event is missing"))?;
        check_size(std::slice::from_ref(&ev))?;
        let service = self.service.clone();
        let started = std::time::Instant::now();
        let created = [ev.created_at_ms];
        let result = detached(async move { service.grant(&ev).await }).await?;
        observe("grant", started, std::slice::from_ref(&result), &created);
        Ok(Response::new(GrantResponse {
            result: Some(result),
        }))
    }

    async fn grant_async(
        &self,
        req: Request<GrantAsyncRequest>,
    ) -> Result<Response<GrantAsyncResponse>, Status> {
        let ev = req
            .into_inner()
            .event
            .ok_or_else(|| Status::invalid_argument("GrantAsyncRequest.event is missing"))?;
        check_size(std::slice::from_ref(&ev))?;
        let service = self.service.clone();
        let started = std::time::Instant::now();
        let created = [ev.created_at_ms];
        let result = detached(async move { service.grant_async(&ev).await }).await?;
        observe(
            "grant_async",
            started,
            std::slice::from_ref(&result),
            &created,
        );
        Ok(Response::new(GrantAsyncResponse {
            result: Some(result),
        }))
    }

    async fn grant_batch(
        &self,
        req: Request<GrantBatchRequest>,
    ) -> Result<Response<GrantBatchResponse>, Status> {
        let GrantBatchRequest {
            events,
            require_proof,
        } = req.into_inner();
        if events.len() > self.service.max_batch() {
            return Err(Status::invalid_argument(format!(
                "{} events in one batch; at most {}",
                events.len(),
                self.service.max_batch()
            )));
        }
        check_size(&events)?;
        let proofs = if require_proof {
            Proofs::Required
        } else {
            Proofs::Vouched
        };
        let service = self.service.clone();
        let started = std::time::Instant::now();
        let created: Vec<i64> = events.iter().map(|e| e.created_at_ms).collect();
        let results = detached(async move { service.grant_batch(events, proofs).await }).await?;
        observe("grant_batch", started, &results, &created);
        Ok(Response::new(GrantBatchResponse { results }))
    }
}

/// Refuses a call holding an event larger than any the limits allow
/// (`INVALID_ARGUMENT`, naming its position).
fn check_size(events: &[proto::v1::RewardEvent]) -> Result<(), Status> {
    use prost::Message as _;
    let max = proto::limits::MAX_EVENT_BYTES;
    match events.iter().position(|e| e.encoded_len() > max) {
        Some(i) => Err(Status::invalid_argument(format!(
            "event {i} is {} bytes encoded; at most {max} (proto::limits)",
            events[i].encoded_len()
        ))),
        None => Ok(()),
    }
}

/// Records a call: its duration (`reward_service_call_seconds`), each result's
/// outcome (`reward_service_grants_total`) and each first credit's end-to-end age.
fn observe(
    api: &'static str,
    started: std::time::Instant,
    results: &[proto::v1::GrantResult],
    created: &[i64],
) {
    metrics::histogram!("reward_service_call_seconds", "api" => api)
        .record(started.elapsed().as_secs_f64());
    crate::service::count_outcomes(api, results, created);
}

/// Runs `work` as its own task and waits for it, so dropping the waiter (the caller
/// went away) does not cancel the work.
pub async fn detached<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, Status> {
    tokio::spawn(work)
        .await
        .map_err(|e| Status::internal(format!("the grant task failed: {e}")))
}

/// The interceptor that checks the bearer credential (`None`: refuses every call,
/// for an API whose credential is not configured).
pub use reward_runtime::credential::BearerAuth as Auth;

/// The gRPC server's service, behind the credential check; messages up to
/// `max_message_bytes` decode.
pub fn server(
    service: Service,
    credential: Credential,
    max_message_bytes: usize,
) -> InterceptedService<RewardServiceServer<GrpcApi>, Auth> {
    let inner =
        RewardServiceServer::new(GrpcApi { service }).max_decoding_message_size(max_message_bytes);
    InterceptedService::new(inner, Auth::new(credential))
}
