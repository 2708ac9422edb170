//! What `send_reward` hands back for a reward it accepted.

/// A reward accepted by the SDK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    /// The sealed token (base64url) to show and give to the user.
    pub token: String,
    /// The reward's trade number.
    pub trade_no: String,
    /// The virtual queue the event went to.
    pub queue: String,
    /// What became of the token's write to the store by the time the call returned.
    pub stored: Stored,
    /// Which store held the reward durably when the call answered.
    pub held_by: HeldBy,
}

impl From<crate::store::Submitted> for Stored {
    fn from(s: crate::store::Submitted) -> Self {
        match s {
            crate::store::Submitted::Stored => Stored::Yes,
            crate::store::Submitted::Retrying => Stored::Retrying,
            crate::store::Submitted::Deferred => Stored::Deferred,
        }
    }
}

/// Which store held a reward durably when `send_reward` answered (counted by path,
/// `reward_sdk_answers_total{path}`). In direct mode (the default) a call answers only
/// once the token store holds it, or, with `store.answer_from_queue` and Redis silent
/// for `store.queue_after_ms`, whichever of the token store and the queue holds it
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldBy {
    /// Redis acknowledged the token write (and the event is on its way).
    Store,
    /// A broker acknowledged the event (with the producer's strongest
    /// acknowledgement) before Redis answered; the token write goes on in the
    /// background ([`Stored::Retrying`]). The reward is credited from its event.
    Queue,
    /// Both brokers and Redis failing: the event is in this host's spool, synced to
    /// disk, and is sent when a broker returns. A host whose disk is lost with it
    /// loses these.
    Spool,
    /// Nothing yet: the opt-in modes that answer before a write lands (deferred, and
    /// batched after a failed first attempt).
    Nothing,
}

impl HeldBy {
    /// The metric label and the SDK host's answer: `stored`, `queued`, `spooled`,
    /// `none`.
    pub fn label(self) -> &'static str {
        match self {
            HeldBy::Store => "stored",
            HeldBy::Queue => "queued",
            HeldBy::Spool => "spooled",
            HeldBy::Nothing => "none",
        }
    }
}

/// What became of a token's write to the store when `send_reward` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// Redis confirmed it (direct mode, the default, and batched mode).
    Yes,
    /// The first attempt failed (batched mode, not strict); the write is retried in
    /// the background until it lands or `store.retry_for_ms` passes.
    Retrying,
    /// Handed to the store's writer without waiting (`store.write_mode =
    /// "deferred"`, an opt-in); retried in the background if Redis fails, lost if the
    /// process dies first.
    Deferred,
}
