//! What a batch's events must prove ([`Proofs`]), and the `[events]` settings for
//! events that carry no proof.

/// The `[events]` section: what `GrantBatch` with `require_proof` (a consumer's call)
/// does with an event that carries no proof.
///
/// ```toml
/// [events]
/// unproven = "refuse"                              # the default
/// # During a rollout from SDKs that did not sign yet:
/// # unproven = "accept"
/// # accept_unproven_until = "2027-01-20T00:00:00Z"   # UTC, at most 30 days ahead
/// ```
///
/// `accept` credits events without a proof, each counted
/// (`reward_service_events_unproven_accepted_total`), and only until
/// `accept_unproven_until`: from then on they are refused as under `refuse`, without a
/// restart. There is no way to accept them for good. While the window is open, *any*
/// event without a proof is credited, a stranger's included (within budgets and
/// ceilings): open it only for the rollout. An event whose proof is present but wrong
/// (another key, other fields) is refused in both modes, and so is an expired one.
///
/// Rollout order for a running fleet: (1) services, with an `accept` window; (2)
/// consumers (an older consumer that parks an event re-encodes it without the fields
/// it does not know, its proof among them); (3) SDKs; (4) let the window end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventsConfig {
    /// Until when (Unix ms) events without a proof are credited; `None`: never.
    pub accept_unproven_until_ms: Option<i64>,
}

/// The longest an `accept` window may reach ahead of the start-up (30 days): past the
/// retention of any topic an unsigned event could still sit in.
pub const MAX_ACCEPT_WINDOW_MS: i64 = 30 * 24 * 3_600_000;

/// Whether a batch's events must prove they were issued by a key holder
/// ([`sdk::token::proof`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proofs {
    /// Events read off a topic (`GrantBatchRequest.require_proof`): each must carry a
    /// valid proof (within an `accept` window of `[events]`, one without a proof
    /// passes and is counted).
    Required,
    /// Events the caller vouches for: a grant credential holder's own, or the
    /// service's (the sweeper's and the wallet's, rebuilt from tokens it opened).
    Vouched,
}
