//! Many events at once (`GrantBatch`): checked, granted together, copies of one trade
//! number answered from the first, results in request order.

use proto::v1::{GrantOutcome, GrantResult, RewardEvent};
use reward_runtime::clock::now_ms;

use super::event::expired;
use super::handle::Service;
use super::proofs::Proofs;
use super::results::{failed, result_of};
use crate::claim::Grant;

impl Service {
    /// Grants every event at once; results in request order. With
    /// [`Proofs::Required`] an event without a valid proof is answered `INVALID` with
    /// its `PROOF_*` code and never reaches a claim.
    pub async fn grant_batch(&self, events: Vec<RewardEvent>, proofs: Proofs) -> Vec<GrantResult> {
        // Invalid events are answered at once; the rest go to the granter together.
        let mut out: Vec<Option<GrantResult>> = vec![None; events.len()];
        let mut grants = Vec::with_capacity(events.len());
        let mut at = Vec::with_capacity(events.len());
        let mut unproven: Option<(&'static str, &str, usize)> = None;
        let mut late = Vec::new(); // expired or undeclared type: admitted() decides
        let now = now_ms();
        for (i, ev) in events.iter().enumerate() {
            match self.checked(ev, proofs) {
                Ok(g)
                    if expired(ev.expires_at_ms, now)
                        || !self.granter.knows_type(&g.reward_type) =>
                {
                    late.push((i, g));
                }
                Ok(g) => {
                    grants.push(g);
                    at.push(i);
                }
                Err(r) => {
                    if r.code.starts_with("PROOF_") {
                        let seen = unproven.map_or(0, |(_, _, n)| n);
                        let first =
                            unproven.map_or((r.code, ev.trade_no.as_str()), |(c, t, _)| (c, t));
                        unproven = Some((first.0, first.1, seen + 1));
                    }
                    out[i] = Some(r.result(&ev.trade_no));
                }
            }
        }
        // Past their expiry or of an undeclared type: on only if already claimed
        // (rare, so one read each).
        for (i, g) in late {
            match self.admitted(&g, events[i].expires_at_ms).await {
                None => {
                    grants.push(g);
                    at.push(i);
                }
                Some(answer) => out[i] = Some(answer),
            }
        }
        if let Some((code, trade_no, n)) = unproven {
            // One line per batch, whatever a hostile topic holds.
            tracing::warn!(refused = n, first_code = code, first_trade_no = %trade_no,
                "events without a valid proof refused (a record nobody with the token keys issued)");
        }
        // A trade number twice in the batch: one copy per trade number is claimed in a
        // round, the first in request order. A later copy of the same reward answers
        // what that one got (GRANTED as DUPLICATE, with its receipt). A copy that
        // differs is a CONFLICT when the first was credited (the record holds the
        // first's fields); otherwise the record may hold the copy's own fields, or
        // none, so the copy goes to the store in the next round, as a later call would.
        let mut pending: Vec<(usize, Grant)> = at.into_iter().zip(grants).collect();
        pending.sort_by_key(|(i, _)| *i);
        let mut round = 0;
        while !pending.is_empty() {
            round += 1;
            if round > MAX_COPY_ROUNDS {
                for (i, g) in pending.drain(..) {
                    out[i] = Some(GrantResult {
                        retry_after_ms: 100,
                        ..failed(
                            &g.trade_no,
                            GrantOutcome::RetryLater,
                            "REPEATED_IN_BATCH",
                            format!(
                                "more than {MAX_COPY_ROUNDS} different versions of this trade number in one batch; nothing was claimed for this one: send it again"
                            ),
                        )
                    });
                }
                break;
            }
            let (kept, copies) = split_copies(pending);
            let grants: Vec<Grant> = kept.iter().map(|(_, g)| g.clone()).collect();
            let results = self.granter.grant_many(&grants).await;
            for ((i, g), r) in kept.iter().zip(results) {
                out[*i] = Some(result_of(&g.trade_no, r));
            }
            pending = Vec::new();
            for (i, g, first, same) in copies {
                let Some(first) = out[kept[first].0].clone() else {
                    continue;
                };
                match copy_answer(first, same) {
                    Some(answer) => out[i] = Some(answer),
                    None => pending.push((i, g)),
                }
            }
        }
        out.into_iter()
            .enumerate()
            .map(|(i, r)| {
                let mut r = r.unwrap_or_else(|| {
                    failed(
                        &events[i].trade_no,
                        GrantOutcome::FailedRetryable,
                        "INTERNAL",
                        "the grant ended without an answer; send it again".into(),
                    )
                });
                r.index = u32::try_from(i).unwrap_or(u32::MAX);
                r
            })
            .collect()
    }
}

/// Rounds of claims one `GrantBatch` may take for the versions of one trade number
/// (a version differing from a copy not credited goes to the store in the next round).
const MAX_COPY_ROUNDS: usize = 4;

/// Splits grants (in request order) into the first copy of each trade number and
/// the later copies: (request position, grant, position of the first copy among the
/// kept ones, whether the copy is the same reward: user, type, amount and
/// activity/scene, what a claim record compares).
#[allow(clippy::type_complexity)]
fn split_copies(
    grants: Vec<(usize, Grant)>,
) -> (Vec<(usize, Grant)>, Vec<(usize, Grant, usize, bool)>) {
    let mut first: std::collections::HashMap<String, usize> =
        std::collections::HashMap::with_capacity(grants.len());
    let mut kept: Vec<(usize, Grant)> = Vec::with_capacity(grants.len());
    let mut copies = Vec::new();
    for (i, g) in grants {
        if let Some(&p) = first.get(g.trade_no.as_str()) {
            let f = &kept[p].1;
            let same = f.user_id == g.user_id
                && f.reward_type == g.reward_type
                && f.amount == g.amount
                && f.scene == g.scene;
            copies.push((i, g, p, same));
        } else {
            first.insert(g.trade_no.clone(), kept.len());
            kept.push((i, g));
        }
    }
    (kept, copies)
}

/// The answer to a later copy of a trade number in one batch, from the first copy's;
/// `None` when only the store can answer it (a differing copy whose first copy was
/// not credited: the record may hold the copy's fields, or there may be none).
fn copy_answer(first: GrantResult, same: bool) -> Option<GrantResult> {
    let outcome = GrantOutcome::try_from(first.outcome).ok();
    if !same {
        return match outcome {
            Some(GrantOutcome::Granted | GrantOutcome::Duplicate) => Some(failed(
                &first.trade_no,
                GrantOutcome::Conflict,
                "CONFLICT",
                "the trade number was credited earlier in this batch with another user, type, amount or scene"
                    .into(),
            )),
            _ => None,
        };
    }
    Some(match outcome {
        Some(GrantOutcome::Granted) => GrantResult {
            outcome: GrantOutcome::Duplicate as i32,
            error_code: String::new(),
            message: "granted by its earlier copy in this batch".into(),
            ..first
        },
        _ => first,
    })
}
