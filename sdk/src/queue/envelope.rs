//! An accepted event on its way through the queue (the envelope), and how the caller
//! who asked for it learns where it settled: delivered, spooled or only logged.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::oneshot;

/// An accepted event on its way.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// The virtual queue.
    pub queue: Arc<str>,
    /// Trade number (partition key).
    pub key: String,
    /// The user's ratio bucket.
    pub bucket: u8,
    /// The encoded event.
    pub payload: Bytes,
    pub(super) attempt: u32,
    notice: Option<Notice>,
}

/// How an accepted event settled (see [`crate::Sdk::enqueue_confirmed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// A broker acknowledged it.
    Delivered,
    /// Both brokers failed; it is in the spool file (synced) and will be replayed.
    Spooled,
    /// Neither a broker nor the spool took it; it was only logged (base64).
    Logged,
}

/// One waiter's side of a settlement; shared by the envelope's clones, fired once.
type Notice = Arc<Mutex<Option<oneshot::Sender<Settled>>>>;

impl Envelope {
    /// A new envelope for `queue`.
    pub fn new(queue: Arc<str>, key: String, bucket: u8, payload: Bytes) -> Self {
        Self {
            queue,
            key,
            bucket,
            payload,
            attempt: 0,
            notice: None,
        }
    }

    /// The same envelope, telling the returned receiver how it settled.
    pub(crate) fn with_notice(mut self) -> (Self, oneshot::Receiver<Settled>) {
        let (tx, rx) = oneshot::channel();
        self.notice = Some(Arc::new(Mutex::new(Some(tx))));
        (self, rx)
    }

    pub(super) fn notify(&self, how: Settled) {
        if let Some(n) = &self.notice
            && let Ok(mut n) = n.lock()
            && let Some(tx) = n.take()
        {
            let _ = tx.send(how);
        }
    }
}
