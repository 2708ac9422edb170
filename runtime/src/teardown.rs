//! Dropping what may hang on drop, with a deadline.
//!
//! A librdkafka client's destroy waits for its broker threads; against a broker that
//! stopped answering (docs/stack.md) it can wait for ever. A process that must stop on time (the consumer's shutdown, a test, a smoke
//! probe) drops such a client with [`drop_within`] instead of in place.

use std::time::Duration;

/// Drops `value` on a thread of its own and waits at most `deadline` for it. Returns
/// false if the drop did not finish: the thread is then left behind, but the caller
/// (and its runtime's shutdown) goes on.
///
/// ```
/// use std::time::Duration;
/// assert!(reward_runtime::teardown::drop_within(vec![1, 2, 3], Duration::from_secs(1)));
/// ```
pub fn drop_within<T: Send + 'static>(value: T, deadline: Duration) -> bool {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(value);
        let _ = done_tx.send(());
    });
    done_rx.recv_timeout(deadline).is_ok()
}
