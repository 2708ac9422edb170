//! What the pipeline's parts share, so each exists once.
//!
//! Always built (the SDK uses these too; they need only Redis and TOML):
//! - [`clock`]: wall-clock time in the one unit every record carries (Unix ms).
//! - [`script`]: a Lua script on Redis, called by SHA, sent with its body after
//!   `NOSCRIPT` (any node of a cluster); one-call and pipelined forms.
//! - [`keyspace`]: `SCAN` over one Redis or every primary of a Redis Cluster.
//! - [`redis`]: the client builder every long-lived client uses (reconnects, deadlines,
//!   cluster redirections).
//! - [`dynamic`]: the dynamic-config watcher: a file and a Redis hash merged over
//!   the start-up document, polled, handed to subscribers that validate and swap.
//! - [`env`]: configuration documents and their `PREFIX__SECTION__KEY` environment
//!   overlays.
//! - [`credential`]: bearer credentials from the environment or a file, never printed,
//!   compared in constant time.
//! - [`counters`]: counts a process reads back and Prometheus scrapes, kept in one
//!   step; labelled counters whose handles are registered once per label value.
//! - [`teardown`]: dropping a client whose destroy can hang, with a deadline.
//! - [`catalogue`]: every metric once (name, type, HELP, labels), described and
//!   registered at 0 at start so `rate()` sees a first event.
//!
//! With feature `service` (the binaries; an activity service linking the SDK builds
//! none of it):
//! - [`admin`]: `/metrics`, `/healthz`, `/readyz` and the process's metrics recorder.
//! - [`service`]: tracing set-up, the stop signal (SIGTERM, Ctrl-C), exit statuses.

#[cfg(feature = "service")]
pub mod admin;
pub mod catalogue;
pub mod clock;
pub mod counters;
pub mod credential;
pub mod dynamic;
pub mod env;
pub mod keyspace;
pub mod redis;
pub mod script;
#[cfg(feature = "service")]
pub mod service;
pub mod teardown;
