//! Who may use a shared server of the local stack while a test disrupts it, across
//! threads and test binaries alike.
//!
//! `ops/test` runs several test binaries at once, and a chaos replay stops or pauses a
//! server they all share (the stack's Redis, a broker) or kills a primary of the
//! stack's Redis Cluster. Each such server has a lock file; a test that disrupts it
//! holds the lock [`Use::Alone`], everything else that uses it [`Use::Shared`]. The
//! lock is an advisory `flock(2)` on an open file, so it is released when the holder
//! drops its guard or its process dies (a crashed test never leaves the stack locked),
//! and two guards of one process exclude each other exactly as guards of two
//! processes do. `ops/test` takes the shared side for a whole test binary with
//! `flock(1)`; a test binary that disrupts a server takes its locks test by test.
//!
//! The files live in the stack's directory (`REWARD_STACK_DIR`, else the system's
//! temporary directory), named `test-<server>.lock`.
//!
//! ```
//! use reward_testkit::stack_lock::{Server, Use, hold};
//! // Shared holders do not exclude each other; `Use::Alone` would wait for both.
//! let shared = hold(Server::Stack, Use::Shared);
//! let also = hold(Server::Stack, Use::Shared);
//! drop((shared, also));
//! ```

use std::fs::{File, OpenOptions};
use std::path::PathBuf;

/// A server (or group of servers) that a test may disrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// The single-node stack: its Redis, the wallet's Redis, the brokers.
    Stack,
    /// The stack's Redis Cluster (`REWARD_REDIS_TOPOLOGY=cluster ops/stack up`).
    Cluster,
}

impl Server {
    fn file_name(self) -> &'static str {
        match self {
            Server::Stack => "test-stack.lock",
            Server::Cluster => "test-cluster.lock",
        }
    }
}

/// How a test uses a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Uses it as it is; any number of shared users at once.
    Shared,
    /// Stops, pauses or otherwise disrupts it: no other user meanwhile.
    Alone,
}

/// A held lock; dropping it releases the lock.
#[derive(Debug)]
pub struct Held {
    _file: File,
}

/// The lock file of `server` (what `ops/test` passes to `flock -s`).
pub fn path(server: Server) -> PathBuf {
    std::env::var_os("REWARD_STACK_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_dir())
        .unwrap_or_else(std::env::temp_dir)
        .join(server.file_name())
}

/// Waits until `server` may be used as `how`, and holds it so until the guard drops.
/// Panics (failing the test, naming the file) if the lock file cannot be opened or
/// locked: a test that cannot tell whether the stack is being disrupted must not run.
pub fn hold(server: Server, how: Use) -> Held {
    hold_file(&path(server), how)
}

fn hold_file(path: &std::path::Path, how: Use) -> Held {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("the test lock {}: {e}", path.display()));
    let locked = match how {
        Use::Shared => file.lock_shared(),
        Use::Alone => file.lock(),
    };
    locked.unwrap_or_else(|e| panic!("locking {} ({how:?}): {e}", path.display()));
    Held { _file: file }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, mpsc};

    #[test]
    fn alone_waits_for_every_shared_holder_of_this_process() {
        let path = crate::temp_dir("stack-lock").join("test.lock");
        let shared = hold_file(&path, Use::Shared);
        let got = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let flag = Arc::clone(&got);
        let file = path.clone();
        let t = std::thread::spawn(move || {
            tx.send(()).ok();
            let _alone = hold_file(&file, Use::Alone);
            flag.store(true, Ordering::SeqCst);
        });
        rx.recv().ok();
        // The other thread is (or soon will be) waiting; while the shared guard lives it
        // cannot hold the lock, whatever the scheduler does.
        assert!(
            File::open(&path)
                .and_then(|f| f.try_lock().map_err(std::io::Error::other))
                .is_err(),
            "a shared holder did not exclude an exclusive one"
        );
        assert!(!got.load(Ordering::SeqCst));
        drop(shared);
        t.join().ok();
        assert!(got.load(Ordering::SeqCst));
    }
}
