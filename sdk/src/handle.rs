//! The SDK's handle: `send_reward` and what an activity service reads and changes
//! while it runs.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use prost::Message as _;

use crate::calls;
use crate::config::WriteMode;
use crate::config::{ConfigError, Routing, SdkConfig};
use crate::dynamic::routing_of;
use crate::error::{Pushback, SendError};
use crate::issued::{HeldBy, IssuedToken, Stored};
use crate::queue::{self, CloseReport, Engine, EnqueueError, Envelope, StatsSnapshot};
use crate::request::{RequestError, RewardRequest};
use crate::store::{StoreError, Submitted, TokenStore};
use crate::token::TokenCodec;

/// What every clone of an [`Sdk`] shares.
pub(crate) struct Inner {
    pub(crate) config: SdkConfig,
    pub(crate) codec: TokenCodec,
    pub(crate) store: TokenStore,
    pub(crate) engine: Arc<Engine>,
    pub(crate) routing: Arc<ArcSwap<Routing>>,
    pub(crate) watcher: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// The SDK: cheap to clone, share one per process.
#[derive(Clone)]
pub struct Sdk {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Sdk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sdk")
            .field("engine", &self.inner.engine)
            .finish_non_exhaustive()
    }
}

/// An event waiting on its token write: sent when the write is done, or when the
/// `send_reward` future is dropped mid-write; dropped unsent only by [`cancel`].
///
/// [`cancel`]: SendOnDrop::cancel
struct SendOnDrop<'a> {
    engine: &'a queue::Engine,
    parts: Option<(queue::Slot, Envelope)>,
}

impl SendOnDrop<'_> {
    /// Queues the event now (what dropping the guard does).
    fn send(self) {
        drop(self);
    }

    /// Gives the queue slot back without sending (the reward was refused).
    fn cancel(&mut self) {
        self.parts = None;
    }
}

impl Drop for SendOnDrop<'_> {
    fn drop(&mut self) {
        if let Some((slot, env)) = self.parts.take() {
            self.engine.commit(slot, env);
        }
    }
}

/// Direct mode: the token write gets `after` to decide the call alone (stored, or
/// refused by the cap or by Redis refusing the command); then the event goes, and the first
/// store to hold the reward answers. By `deadline` (the call's `write_wait_ms`), a
/// reward neither holds is refused in doubt: [`SendError::InDoubt`] while its event is
/// still on its way (it will most likely be credited), [`SendError::Store`] once the
/// event came to nothing (only logged) and only the write may still land.
/// A write still in flight when the call answers goes on in a task of its own
/// ([`go_on`]).
async fn either_store<W>(
    store: &TokenStore,
    write: W,
    mut pending: SendOnDrop<'_>,
    mut settled: tokio::sync::oneshot::Receiver<queue::Settled>,
    after: Duration,
    deadline: tokio::time::Instant,
) -> Result<(Stored, HeldBy), SendError>
where
    W: std::future::Future<Output = Result<Submitted, StoreError>> + Send + 'static,
{
    let mut write = Box::pin(write);
    let mut write_open = true;
    let mut write_err = None;
    match tokio::time::timeout(after, &mut write).await {
        Ok(Ok(Submitted::Stored)) => {
            pending.send();
            return Ok((Stored::Yes, HeldBy::Store));
        }
        Ok(Err(StoreError::CapReached { cap })) => {
            pending.cancel();
            return Err(SendError::TooManyTokens { cap });
        }
        // Redis refused the command itself (a failure it retries would still be
        // retried): refused as alone, nothing sent.
        Ok(Err(e)) => {
            pending.cancel();
            return Err(SendError::Store(e));
        }
        // Handed to the background already: only the event can hold it in time.
        Ok(Ok(_)) => {
            write_open = false;
            pending.send();
        }
        Err(_) => pending.send(),
    }
    let mut event_open = true;
    let no_answer = || StoreError::Redis("token write: no answer within the call's wait".into());
    loop {
        if !write_open && !event_open {
            return Err(SendError::Store(write_err.unwrap_or_else(no_answer)));
        }
        // Biased: a store that holds the reward as the deadline passes answers it.
        tokio::select! {
            biased;
            w = &mut write, if write_open => {
                write_open = false;
                match w {
                    Ok(Submitted::Stored) => return Ok((Stored::Yes, HeldBy::Store)),
                    // Its wait passed: it goes on in the background until it lands.
                    Ok(_) => {}
                    // The event has gone: the reward is credited from it without its
                    // token (the cap, or Redis refusing the command): counted unstored.
                    Err(e) => {
                        store.went_on_unstored(&e);
                        write_err = Some(e);
                    }
                }
            },
            s = &mut settled, if event_open => match s.ok().and_then(held_by_queue) {
                Some(held) => {
                    if write_open {
                        go_on(store, write);
                    }
                    return Ok(held);
                }
                // Only logged (or the SDK dropped): not durable; the write may be.
                None => event_open = false,
            },
            // In doubt: a write still in flight goes on in the background (its guard),
            // and an event not yet settled may still be delivered or spooled.
            () = tokio::time::sleep_until(deadline) => {
                if write_open {
                    go_on(store, write);
                }
                let e = write_err.unwrap_or_else(no_answer);
                return Err(if event_open {
                    SendError::InDoubt(e)
                } else {
                    SendError::Store(e)
                });
            }
        }
    }
}

/// Lets a token write still in flight when its call answered finish in a task of its
/// own. Dropped instead, its attempt's answer would be lost and the write sent again
/// from the start: one more script call for every reward the queue answered, just
/// when Redis is slow (the replays counted one retry per `queued` answer). A write
/// refused after its event went (the cap) is counted unstored, as in the call.
fn go_on<W>(store: &TokenStore, write: std::pin::Pin<Box<W>>)
where
    W: std::future::Future<Output = Result<Submitted, StoreError>> + Send + 'static,
{
    let store = store.clone();
    tokio::spawn(async move {
        if let Err(e) = write.await {
            store.went_on_unstored(&e);
        }
    });
}

/// What an event's settlement says about the call's answer: held by the queue or the
/// spool, or by neither (only logged).
fn held_by_queue(s: queue::Settled) -> Option<(Stored, HeldBy)> {
    match s {
        queue::Settled::Delivered => Some((Stored::Retrying, HeldBy::Queue)),
        queue::Settled::Spooled => Some((Stored::Retrying, HeldBy::Spool)),
        queue::Settled::Logged => None,
    }
}

impl Sdk {
    /// Validates, mints the token, answers once the token store or the queue holds the
    /// reward (the crate's doc, "What `send_reward` does"), returns the token and which
    /// store held it ([`IssuedToken::held_by`]).
    ///
    /// Each call is counted by outcome (`reward_sdk_calls_total`) and timed from call
    /// to answer (`reward_sdk_send_reward_seconds`): the two SLOs an activity service
    /// answers for (`docs/metrics.md`).
    pub async fn send_reward(&self, req: RewardRequest) -> Result<IssuedToken, SendError> {
        let call = calls::Call::start();
        let answer = self.send_reward_timed(req).await;
        call.answered(&answer);
        answer
    }

    async fn send_reward_timed(&self, req: RewardRequest) -> Result<IssuedToken, SendError> {
        let inner = &*self.inner;
        req.validate(&inner.config.limits)?;
        let (queue, max_amount) = {
            let routing = inner.routing.load();
            let (queue, _) = routing
                .route(&req.reward_type)
                .ok_or_else(|| RequestError::UnknownRewardType(req.reward_type.clone()))?;
            let max = routing
                .max_amount(&req.reward_type)
                .unwrap_or(inner.config.limits.max_amount);
            (queue.to_string(), max)
        };
        req.check_amount(max_amount)?;
        // Room in the queue, then a place for the token write, both within one wait:
        // when either is behind, the reward is refused before anything is minted (a
        // refused place drops the slot, which gives it back).
        let started = tokio::time::Instant::now();
        let slot = inner.engine.reserve(&queue).await?;
        let wait = Duration::from_millis(inner.config.batch.enqueue_wait_ms)
            .saturating_sub(started.elapsed());
        let held = match inner.store.hold(wait).await {
            Ok(h) => h,
            Err(StoreError::Closed) => return Err(SendError::Closed),
            Err(e) => return Err(SendError::Backpressure(Pushback::TokenWrites(e))),
        };
        let now = reward_runtime::clock::now_ms();
        let ttl_ms =
            i64::try_from(inner.config.token.ttl_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
        let expires_at_ms = now.saturating_add(ttl_ms);
        let token = req.token(now, expires_at_ms);
        let sealed = inner.codec.seal_at(&token, now)?;
        // The event is built before the token write and handed to a guard: if the
        // caller drops this future while the write is in flight (it may have landed),
        // the guard still queues the event, so a stored token never lacks its event.
        // It carries the token's expiry and a proof under the token keys, so the
        // service can refuse an event nobody with the keys issued.
        let mut event = req.event(now, expires_at_ms);
        inner.codec.proofs().sign(&mut event);
        let payload = Bytes::from(event.encode_to_vec());
        let env = Envelope::new(
            Arc::from(queue.as_str()),
            req.trade_no.clone(),
            queue::bucket(&req.user.user_id),
            payload,
        );
        // Direct mode, not strict, opted in: the reward may be answered from the queue
        // when Redis does not answer in time, so the event tells when a broker took it.
        let store_cfg = &inner.config.store;
        let race = store_cfg.answer_from_queue
            && store_cfg.write_mode == WriteMode::Direct
            && !store_cfg.strict;
        let (env, settled) = if race {
            let (env, rx) = env.with_notice();
            (env, Some(rx))
        } else {
            (env, None)
        };
        let mut pending = SendOnDrop {
            engine: &inner.engine,
            parts: Some((slot, env)),
        };
        let (user, activity, trade) = (&req.user.user_id, &req.activity_id, &req.trade_no);
        let (stored, held_by) = match settled {
            None => {
                let write = inner
                    .store
                    .submit(held, user, activity, trade, sealed.clone());
                let stored = match write.await {
                    Ok(s) => Stored::from(s),
                    Err(StoreError::CapReached { cap }) => {
                        pending.cancel();
                        return Err(SendError::TooManyTokens { cap });
                    }
                    // A failure the caller hears: strict mode, or Redis refusing the
                    // command itself (else a failed write is retried in the background).
                    Err(e) => {
                        pending.cancel();
                        return Err(SendError::Store(e));
                    }
                };
                pending.send();
                let held_by = if stored == Stored::Yes {
                    HeldBy::Store
                } else {
                    HeldBy::Nothing
                };
                (stored, held_by)
            }
            Some(settled) => {
                // Racing the event: a write whose wait passes goes on in the
                // background rather than being given up. Owned, so that an attempt
                // in flight when the call answers can finish on its own (`go_on`).
                let store = inner.store.clone();
                let (user, activity, trade, token) = (
                    user.clone(),
                    activity.clone(),
                    trade.clone(),
                    sealed.clone(),
                );
                let write = async move {
                    store
                        .submit_racing(held, &user, &activity, &trade, token)
                        .await
                };
                let after = Duration::from_millis(inner.config.store.queue_after_ms);
                let budget = Duration::from_millis(inner.config.store.write_wait_ms);
                either_store(
                    &inner.store,
                    write,
                    pending,
                    settled,
                    after,
                    started + budget,
                )
                .await?
            }
        };
        Ok(IssuedToken {
            token: sealed,
            trade_no: req.trade_no,
            queue,
            stored,
            held_by,
        })
    }

    /// Hands an already-encoded payload to the virtual queue: no validation, no token.
    /// For the pipeline's own services: the reward service's async grants and failure
    /// events, the consumer's requeues (a new `key`) and dead letters.
    ///
    /// `queue` names the virtual queue; `None` routes by `reward_type` as
    /// [`Sdk::send_reward`] does (the default queue for unknown types). `user_id`
    /// picks the ratio bucket. Like `send_reward` it never waits for a broker: once it
    /// returns `Ok` the payload is on its way, or in the spool, and `close` drains it.
    ///
    /// ```no_run
    /// # async fn example(sdk: &sdk::Sdk) -> Result<(), sdk::queue::EnqueueError> {
    /// let queue = sdk
    ///     .enqueue(Some("failures"), None, "u42", "t1".into(), bytes::Bytes::from_static(b"..."))
    ///     .await?;
    /// assert_eq!(queue, "failures");
    /// # Ok(()) }
    /// ```
    pub async fn enqueue(
        &self,
        queue: Option<&str>,
        reward_type: Option<&str>,
        user_id: &str,
        key: String,
        payload: Bytes,
    ) -> Result<String, EnqueueError> {
        let (queue, slot, env) = self
            .envelope(queue, reward_type, user_id, key, payload)
            .await?;
        self.inner.engine.commit(slot, env);
        Ok(queue)
    }

    /// As [`Sdk::enqueue`], and also answers a receiver that resolves once the event
    /// is settled: acknowledged by a broker, synced to the spool, or (both failing)
    /// logged. A service that must not lose what it hands over across a crash of its
    /// own process (the consumer's requeues and dead letters) waits for it before it
    /// forgets its own copy. The receiver fails only if the SDK is dropped first.
    ///
    /// ```no_run
    /// # async fn example(sdk: &sdk::Sdk) -> Result<(), Box<dyn std::error::Error>> {
    /// use sdk::queue::Settled;
    /// let (_queue, settled) = sdk
    ///     .enqueue_confirmed(None, Some("cash"), "u42", "t1-1".into(), bytes::Bytes::from_static(b"..."))
    ///     .await?;
    /// match settled.await? {
    ///     Settled::Delivered | Settled::Spooled => { /* safe to forget our copy */ }
    ///     Settled::Logged => { /* only in the log: keep it */ }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_confirmed(
        &self,
        queue: Option<&str>,
        reward_type: Option<&str>,
        user_id: &str,
        key: String,
        payload: Bytes,
    ) -> Result<(String, tokio::sync::oneshot::Receiver<queue::Settled>), EnqueueError> {
        let (queue, slot, env) = self
            .envelope(queue, reward_type, user_id, key, payload)
            .await?;
        let (env, settled) = env.with_notice();
        self.inner.engine.commit(slot, env);
        Ok((queue, settled))
    }

    /// Picks the queue, reserves room in it and wraps the payload.
    async fn envelope(
        &self,
        queue: Option<&str>,
        reward_type: Option<&str>,
        user_id: &str,
        key: String,
        payload: Bytes,
    ) -> Result<(String, queue::Slot, Envelope), EnqueueError> {
        let inner = &*self.inner;
        let queue = match queue {
            Some(q) => q.to_string(),
            None => {
                let routing = inner.routing.load();
                let routed = routing.route(reward_type.unwrap_or_default());
                match routed {
                    Some((q, _)) => q.to_string(),
                    None => routing.default_queue.clone(),
                }
            }
        };
        let slot = inner.engine.reserve(&queue).await?;
        let env = Envelope::new(
            Arc::from(queue.as_str()),
            key,
            queue::bucket(user_id),
            payload,
        );
        Ok((queue, slot, env))
    }

    /// The token codec (to open tokens in tests and tools).
    pub fn codec(&self) -> &TokenCodec {
        &self.inner.codec
    }

    /// The token store.
    pub fn store(&self) -> &TokenStore {
        &self.inner.store
    }

    /// The queue counters.
    pub fn stats(&self) -> StatsSnapshot {
        self.inner.engine.stats()
    }

    /// Token writes since start whose reward went on but whose token will never be
    /// stored: given up after `store.retry_for_ms` of retries, or (deferred mode)
    /// refused by the per-user cap. Writes still being retried are not counted here;
    /// [`Sdk::close`] reports those left at its deadline.
    pub fn token_write_failures(&self) -> u64 {
        self.inner.store.stats().unstored.load(Ordering::Relaxed)
    }

    /// Bytes waiting in the spool.
    pub fn spool_bytes(&self) -> u64 {
        self.inner.engine.spool_bytes()
    }

    /// The routing in force.
    pub fn routing(&self) -> Arc<Routing> {
        self.inner.routing.load_full()
    }

    /// Applies a new dynamic document (ratios, routing, topics). Refused, with the
    /// old routing kept, if it is inconsistent or names a queue that had no buffer at
    /// start-up (new queues need a restart).
    pub fn apply_config(&self, doc: &toml::Table) -> Result<(), ConfigError> {
        let routing = routing_of(&self.inner.config, doc)?;
        self.inner.routing.store(Arc::new(routing));
        Ok(())
    }

    /// Stops accepting rewards and returns once every accepted one is on a broker or
    /// in the spool, and every deferred token write is answered, or when `deadline`
    /// passes; the report says what is left.
    pub async fn close(&self, deadline: Duration) -> CloseReport {
        let until = tokio::time::Instant::now() + deadline;
        if let Ok(mut w) = self.inner.watcher.lock()
            && let Some(h) = w.take()
        {
            h.abort();
        }
        // Events and token writes drain side by side; a call that reserved its slot
        // before close began may hand over its write after the first flush looked, so
        // look again once the engine is closed (every reserved slot committed).
        let (mut report, _) = tokio::join!(
            self.inner.engine.close(deadline),
            self.inner.store.flush(deadline)
        );
        report.tokens_left = self
            .inner
            .store
            .flush(until.saturating_duration_since(tokio::time::Instant::now()))
            .await;
        report.tokens_unstored = self.token_write_failures();
        if report.tokens_left > 0 || report.tokens_unstored > 0 {
            tracing::warn!(
                left = report.tokens_left,
                given_up = report.tokens_unstored,
                "closing with token writes not stored: their rewards went on without a listed token"
            );
        }
        report
    }
}
