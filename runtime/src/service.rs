//! A binary's start-up and stop (feature `service`): logging, the stop signal and the
//! exit statuses every service binary shares.
//!
//! | exit status | meaning |
//! | --- | --- |
//! | 0 | stopped cleanly, nothing left behind |
//! | 1 | could not start, or stopped with work left (the binary says what) |
//! | 2 | the configuration was refused (the message names the key) |

use std::fmt::Display;
use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

/// Sets up `tracing` for the process: level from `RUST_LOG` (default `info`), human
/// readable text or, with `json`, one JSON object per line.
pub fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        fmt.json().init();
    } else {
        fmt.init();
    }
}

/// Runs a command-line tool (the load tester, the benches, the SDK host): `tracing` to
/// stderr at `RUST_LOG` (default `warn`, so stdout carries only the tool's own
/// output), a multi-thread runtime for `body`, and `body`'s exit status. A runtime
/// that cannot start is one line and status 1. Once `body` has answered, tasks get 5 s
/// to end: a client library's thread stuck in its own shutdown must not keep the
/// process from exiting with its verdict.
pub fn run_tool<F>(body: F) -> ExitCode
where
    F: Future<Output = ExitCode>,
{
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(body);
    runtime.shutdown_timeout(Duration::from_secs(5));
    code
}

/// Resolves on SIGTERM (what `kill`, systemd and Kubernetes send) or Ctrl-C.
pub async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// A binary's name, for the one line it prints when it cannot go on.
#[derive(Debug, Clone, Copy)]
pub struct Binary(pub &'static str);

impl Binary {
    /// A refused configuration: prints `name: error` and gives exit status 2.
    pub fn config<T, E: Display>(self, loaded: Result<T, E>) -> Result<T, ExitCode> {
        loaded.map_err(|e| {
            eprintln!("{}: {e}", self.0);
            ExitCode::from(2)
        })
    }

    /// A failed start: prints `name: error` and gives exit status 1.
    pub fn start<T, E: Display>(self, started: Result<T, E>) -> Result<T, ExitCode> {
        started.map_err(|e| {
            eprintln!("{}: {e}", self.0);
            ExitCode::FAILURE
        })
    }
}
