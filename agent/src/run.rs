//! Starting the agent and stopping it within its drain bound.
//!
//! A stop (SIGTERM in the binary, [`Running::shutdown`] here) runs in this order,
//! all within `[drain] timeout_ms`:
//! 1. every new reward is refused `CLOSING` and `Health` says not serving, so a
//!    client resends elsewhere at once instead of waiting on a closing agent;
//! 2. the listeners stop taking connections and the calls in flight finish (each
//!    answered as usual: a reward answered `issued` is durable), for at most half
//!    the bound; a call still running then is cut, and its caller, in doubt, resends;
//! 3. the SDK closes with the rest of the bound: queued events go to a broker or the
//!    spool, token writes are flushed, the spool is closed; the report says what was
//!    left;
//! 4. the socket file is removed, unless a newer agent has replaced it meanwhile.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use proto::v1::reward_agent_server::RewardAgentServer;
use reward_runtime::admin::{PrometheusHandle, ReadyCheck};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::AgentConfig;
use crate::service::AgentService;

/// The largest request the agent decodes: a full batch at every field's limit (1000
/// rewards of about 9.4 KB) with room to spare.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Why the agent did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The SDK did not start (its token store, keys or brokers).
    #[error("the SDK did not start: {0}")]
    Sdk(#[from] sdk::StartError),
    /// The socket or a port.
    #[error(transparent)]
    Listen(#[from] crate::listen::ListenError),
    /// The TCP or admin port.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
}

/// A started agent.
#[derive(Debug)]
pub struct Running {
    /// The Unix socket it serves.
    pub socket: PathBuf,
    socket_id: (u64, u64),
    /// The TCP address it serves, when configured.
    pub tcp_addr: Option<SocketAddr>,
    /// `/metrics`, `/healthz`, `/readyz`, when a recorder was given.
    pub admin_addr: Option<SocketAddr>,
    sdk: Arc<sdk::Sdk>,
    draining: Arc<AtomicBool>,
    stop: watch::Sender<bool>,
    servers: Vec<JoinHandle<Result<(), tonic::transport::Error>>>,
    admin: Option<JoinHandle<()>>,
    drain: Duration,
}

/// What a stop left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopReport {
    /// Calls still running when the drain bound passed (their callers are in doubt
    /// and resend).
    pub calls_cut: bool,
    /// Events neither delivered nor spooled.
    pub events_left: u64,
    /// Token writes Redis had not answered.
    pub tokens_left: u64,
}

/// Starts the SDK and the listeners. `keys` replaces the key ring the SDK would read
/// from its config or the environment (tests); `metrics`, the process's recorder,
/// turns on the admin endpoints.
pub async fn start(
    cfg: AgentConfig,
    keys: Option<sdk::token::KeyRing>,
    metrics: Option<PrometheusHandle>,
) -> Result<Running, StartError> {
    // The socket first: it is what makes this agent the host's one agent, before its
    // SDK opens (and replays) the spool.
    let bound = crate::listen::unix(
        &cfg.listen.socket,
        cfg.listen.socket_mode,
        cfg.listen.socket_gid,
    )
    .await?;
    let socket_id = bound.id();
    let mut builder = sdk::Sdk::builder(cfg.sdk.clone());
    if let Some(k) = keys {
        builder = builder.key_ring(k);
    }
    let sdk = match builder.start().await {
        Ok(s) => Arc::new(s),
        Err(e) => {
            crate::listen::Bound::remove_if_ours(&cfg.listen.socket, socket_id);
            return Err(e.into());
        }
    };
    // Described and registered at 0 for every outcome (reward_runtime::catalogue).
    reward_runtime::catalogue::register(reward_runtime::catalogue::Component::Agent);
    let draining = Arc::new(AtomicBool::new(false));
    let service = AgentService::new(sdk.clone(), draining.clone(), cfg.max_batch);
    let (stop, stopped) = watch::channel(false);
    let until_stop = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let mut servers = Vec::new();
    let svc = RewardAgentServer::new(service.clone()).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let rx = stopped.clone();
    servers.push(tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::UnixListenerStream::new(bound.listener),
                until_stop(rx),
            ),
    ));

    let mut tcp_addr = None;
    if let Some((addr, credential)) = &cfg.listen.tcp {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind {
                addr: *addr,
                source,
            })?;
        tcp_addr = Some(listener.local_addr().map_err(|source| StartError::Bind {
            addr: *addr,
            source,
        })?);
        let auth = reward_runtime::credential::BearerAuth::new(credential.clone());
        let svc = tonic::service::interceptor::InterceptedService::new(
            RewardAgentServer::new(service).max_decoding_message_size(MAX_MESSAGE_BYTES),
            auth,
        );
        let rx = stopped.clone();
        servers.push(tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                    until_stop(rx),
                ),
        ));
    }

    let (admin_addr, admin) = match metrics {
        Some(handle) => {
            let d = draining.clone();
            let ready: ReadyCheck = Arc::new(move || {
                let draining = d.load(Ordering::Acquire);
                Box::pin(async move {
                    if draining {
                        Err("draining: the agent is stopping".to_string())
                    } else {
                        Ok(())
                    }
                })
            });
            let (addr, task) = reward_runtime::admin::serve(cfg.admin_addr, handle, ready)
                .await
                .map_err(|source| StartError::Bind {
                    addr: cfg.admin_addr,
                    source,
                })?;
            (Some(addr), Some(task))
        }
        None => (None, None),
    };

    Ok(Running {
        socket: cfg.listen.socket,
        socket_id,
        tcp_addr,
        admin_addr,
        sdk,
        draining,
        stop,
        servers,
        admin,
        drain: cfg.drain,
    })
}

impl Running {
    /// Stops as the module says, within the configured drain bound.
    pub async fn shutdown(self) -> StopReport {
        let began = tokio::time::Instant::now();
        // Calls in flight get at most half the bound; the SDK's close keeps the rest.
        let calls_until = began + self.drain / 2;
        self.draining.store(true, Ordering::Release);
        let _ = self.stop.send(true);
        let mut calls_cut = false;
        for server in self.servers {
            let abort = server.abort_handle();
            match tokio::time::timeout_at(calls_until, server).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "a listener ended with an error"),
                Ok(Err(e)) => tracing::warn!(error = %e, "a listener's task failed"),
                Err(_) => {
                    calls_cut = true;
                    abort.abort();
                }
            }
        }
        let left = (began + self.drain).saturating_duration_since(tokio::time::Instant::now());
        let close = self.sdk.close(left.max(Duration::from_millis(100))).await;
        if let Some(admin) = self.admin {
            admin.abort();
        }
        crate::listen::Bound::remove_if_ours(&self.socket, self.socket_id);
        StopReport {
            calls_cut,
            events_left: close.left,
            tokens_left: close.tokens_left,
        }
    }
}
