//! The wallet's side of the service: checking the tokens a client presents, the
//! wallet page of a user in an activity, and withdrawing its uncredited tokens.

use std::collections::BTreeMap;

use proto::ids;
use proto::v1::{GrantOutcome, GrantResult, RewardToken, TokenValidity};
use reward_runtime::clock::now_ms;

use futures_util::{StreamExt as _, TryStreamExt as _};

use super::error::ServiceError;
use super::event::grant_of;
use super::handle::Service;
use super::results::result;
pub use sdk::token::event_of;

/// Reads a wallet page keeps in flight at once (per request): enough to hide the
/// round trips of a user with hundreds of rewards, few enough that one page cannot
/// crowd the claim store's connections.
const WALLET_READS: usize = 32;
use crate::claim::ClaimState;

/// One checked token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Legal, unknown or illegal.
    pub validity: TokenValidity,
    /// The opened token (absent when illegal).
    pub token: Option<RewardToken>,
    /// Whether its trade number is credited.
    pub credited: bool,
    /// The stored receipt when credited.
    pub receipt: Option<String>,
    /// Why it is illegal, expired, or cannot be credited.
    pub reason: Option<String>,
    /// Whether a withdrawal would credit it now: legal, not credited, and within
    /// every limit the service applies to a grant (its type's ceiling among them).
    pub creditable: bool,
}

/// What the wallet page shows for a user in an activity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rewards {
    /// Legal, not yet credited.
    pub pending: Vec<RewardToken>,
    /// Credited.
    pub credited: Vec<RewardToken>,
    /// Kept by the client, opening, but unknown to the server.
    pub unknown: Vec<RewardToken>,
    /// Kept by the client, not opening.
    pub illegal: usize,
    /// Stored tokens that no longer open with the current key ring (rotated out), or
    /// whose ids no grant could carry.
    pub unreadable: usize,
    /// Uncredited tokens past their expiry (or older than records are kept): never
    /// credited, not shown as money.
    pub expired: usize,
    /// The trade numbers of the expired ones (so a client merging more codes counts
    /// each once).
    pub expired_trade_nos: Vec<String>,
    /// Uncredited tokens the service will never credit as they stand (over their
    /// type's ceiling, or a pipeline limit): not shown as money.
    pub refused: usize,
    /// Their trade numbers.
    pub refused_trade_nos: Vec<String>,
    /// Per reward type: (pending, credited) amounts.
    pub balance: BTreeMap<String, (i64, i64)>,
    /// The sealed text of each pending token, by trade number: what a withdrawal
    /// presents (the user's own tokens, as `send_reward` returned them).
    pub sealed: BTreeMap<String, String>,
}

impl Service {
    /// Checks one token presented for `user_id` in `activity_id`.
    pub async fn check(
        &self,
        user_id: &str,
        activity_id: &str,
        sealed: &str,
    ) -> Result<Checked, ServiceError> {
        let token = match self.sdk.codec().open(sealed, user_id, activity_id) {
            Ok(t) => t,
            Err(e) => {
                return Ok(Checked {
                    validity: TokenValidity::Illegal,
                    token: None,
                    credited: false,
                    receipt: None,
                    reason: Some(e.to_string()),
                    creditable: false,
                });
            }
        };
        if let Err(why) = ids::check_token(&token).map_err(|(f, p)| format!("{f} {p}")) {
            return Ok(Checked {
                validity: TokenValidity::Illegal,
                token: None,
                credited: false,
                receipt: None,
                reason: Some(why.to_string()),
                creditable: false,
            });
        }
        let (held, record) = tokio::join!(
            self.tokens.holds(user_id, activity_id, &token.trade_no),
            self.granter.claims().record(&token.trade_no),
        );
        let ((pending, credited_hash), record) = (held?, record?);
        // A record of this trade number for someone else does not make the token legal.
        let record = record.filter(|r| r.user_id == user_id);
        let granted = record.as_ref().filter(|r| r.state == ClaimState::Granted);
        let credited = granted.is_some() || credited_hash;
        let legal = pending || credited_hash || record.is_some();
        let expired = self.expired(&token, now_ms());
        let validity = match (legal, &expired) {
            // A credited token stays legal (its record answers a repeat); an
            // uncredited one past its life is never credited.
            (true, Some(_)) if !credited => TokenValidity::Expired,
            (true, _) => TokenValidity::Legal,
            (false, _) => TokenValidity::Unknown,
        };
        let refused = (validity == TokenValidity::Legal && !credited)
            .then(|| self.uncreditable(&token))
            .flatten();
        Ok(Checked {
            creditable: validity == TokenValidity::Legal && !credited && refused.is_none(),
            validity,
            credited,
            receipt: granted.map(|r| r.result.clone()),
            token: Some(token),
            reason: if validity == TokenValidity::Expired {
                expired
            } else {
                refused
            },
        })
    }

    /// Why a legal token can never be credited as it stands (over its type's ceiling,
    /// or over a limit of the pipeline), if so. The wallet shows such a token apart,
    /// never as pending money.
    fn uncreditable(&self, t: &RewardToken) -> Option<String> {
        grant_of(&event_of(t))
            .and_then(|g| self.granter.check_ceiling(&g))
            .err()
    }

    /// Why a token may no longer be credited: past its own expiry, or older than the
    /// claim store keeps records (a record that expired could no longer refuse a
    /// second credit).
    fn expired(&self, t: &RewardToken, now_ms: i64) -> Option<String> {
        let retention_ms = i64::try_from(self.granter.claims().config().retention_secs)
            .unwrap_or(i64::MAX)
            .saturating_mul(1000);
        if t.expires_at_ms > 0 && now_ms >= t.expires_at_ms {
            return Some(format!("expired at {} (Unix ms)", t.expires_at_ms));
        }
        if now_ms >= t.grant_time_ms.saturating_add(retention_ms) {
            return Some("older than the service keeps grant records".into());
        }
        None
    }

    /// Force-credits every legal, uncredited token; one entry per token, in order:
    /// the check and, for legal tokens, the grant's result.
    pub async fn withdraw(
        &self,
        user_id: &str,
        activity_id: &str,
        sealed: &[String],
    ) -> Result<Vec<(Checked, Option<GrantResult>)>, ServiceError> {
        let mut out = Vec::with_capacity(sealed.len());
        for s in sealed {
            let c = self.check(user_id, activity_id, s).await?;
            let r = match (&c.validity, &c.token) {
                (TokenValidity::Legal, Some(t)) if c.credited => Some(GrantResult {
                    downstream_ref: c.receipt.clone().unwrap_or_default(),
                    ..result(&t.trade_no, GrantOutcome::Duplicate)
                }),
                (TokenValidity::Legal, Some(t)) => Some(self.grant(&event_of(t)).await),
                _ => None,
            };
            out.push((c, r));
        }
        Ok(out)
    }

    /// The wallet page of a user in an activity: stored tokens, plus the ones the
    /// client kept (checked one by one), merged by trade number.
    pub async fn rewards(
        &self,
        user_id: &str,
        activity_id: &str,
        kept: &[String],
    ) -> Result<Rewards, ServiceError> {
        let held = self.tokens.held(user_id, activity_id).await?;
        let codec = self.sdk.codec();
        let mut out = Rewards::default();
        let mut seen = std::collections::HashSet::new();
        for (map, credited) in [(&held.pending, false), (&held.credited, true)] {
            for sealed in map.values() {
                match codec.open(sealed, user_id, activity_id) {
                    // A stored token whose ids the service cannot key (written by an
                    // older SDK) is counted, never allowed to fail the page.
                    Ok(t) if ids::check_token(&t).is_err() => out.unreadable += 1,
                    Ok(t) if seen.insert(t.trade_no.clone()) => {
                        if credited {
                            out.credited.push(t);
                        } else {
                            out.sealed.insert(t.trade_no.clone(), sealed.clone());
                            out.pending.push(t);
                        }
                    }
                    Ok(_) => {}
                    Err(_) => out.unreadable += 1,
                }
            }
        }
        // Checked side by side (each check is two Redis reads): a page's wait is a few
        // round trips, not two per code. Results keep the request's order.
        // (Owned items: a closure over borrowed ones is not general enough for the
        // HTTP handlers' `Send` futures.)
        let checks: Vec<Checked> = futures_util::stream::iter(kept.iter().cloned())
            .map(|sealed| async move { self.check(user_id, activity_id, &sealed).await })
            .buffered(WALLET_READS)
            .try_collect()
            .await?;
        for (sealed, c) in kept.iter().zip(checks) {
            let Some(t) = c.token else {
                out.illegal += 1;
                continue;
            };
            if !seen.insert(t.trade_no.clone()) {
                continue;
            }
            match c.validity {
                TokenValidity::Legal if c.credited => out.credited.push(t),
                TokenValidity::Legal if !c.creditable => {
                    out.refused += 1;
                    out.refused_trade_nos.push(t.trade_no);
                }
                TokenValidity::Legal => {
                    out.sealed.insert(t.trade_no.clone(), sealed.clone());
                    out.pending.push(t);
                }
                TokenValidity::Expired => {
                    out.expired += 1;
                    out.expired_trade_nos.push(t.trade_no);
                }
                _ => out.unknown.push(t),
            }
        }
        // A token can sit in the pending hash while its record already says GRANTED
        // (the move after the credit failed): show it as credited.
        let mut still_pending = Vec::with_capacity(out.pending.len());
        let now = now_ms();
        let pending = std::mem::take(&mut out.pending);
        let claims = self.granter.claims();
        let trade_nos: Vec<String> = pending.iter().map(|t| t.trade_no.clone()).collect();
        let records: Vec<_> = futures_util::stream::iter(trade_nos)
            .map(|trade_no| async move { claims.record(&trade_no).await })
            .buffered(WALLET_READS)
            .try_collect()
            .await?;
        for (t, record) in pending.into_iter().zip(records) {
            let granted =
                record.is_some_and(|r| r.state == ClaimState::Granted && r.user_id == user_id);
            if granted {
                out.credited.push(t);
            } else if self.expired(&t, now).is_some() {
                out.expired += 1;
                out.expired_trade_nos.push(t.trade_no);
            } else if self.uncreditable(&t).is_some() {
                out.refused += 1;
                out.refused_trade_nos.push(t.trade_no);
            } else {
                still_pending.push(t);
            }
        }
        out.pending = still_pending;
        let pending: std::collections::HashSet<&str> =
            out.pending.iter().map(|t| t.trade_no.as_str()).collect();
        out.sealed.retain(|k, _| pending.contains(k.as_str()));
        for t in &out.pending {
            out.balance.entry(t.reward_type.clone()).or_default().0 += t.amount;
        }
        for t in &out.credited {
            out.balance.entry(t.reward_type.clone()).or_default().1 += t.amount;
        }
        let by_trade = |a: &RewardToken, b: &RewardToken| a.trade_no.cmp(&b.trade_no);
        out.pending.sort_by(by_trade);
        out.credited.sort_by(by_trade);
        out.unknown.sort_by(by_trade);
        Ok(out)
    }
}
