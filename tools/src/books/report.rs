//! The outcome: the PASS/FAIL table and the counts behind it.

use serde::Serialize;

/// One row of the PASS/FAIL table.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it held.
    pub pass: bool,
    /// Counts behind the verdict.
    pub detail: String,
}

/// The outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Reconciliation {
    /// The table.
    pub checks: Vec<Check>,
    /// Distinct trade numbers sent.
    pub sent: u64,
    /// Repeated sends of a trade number.
    pub repeats: u64,
    /// Distinct trade numbers credited.
    pub credited: u64,
    /// Sum of sent amounts.
    pub sent_amount: i64,
    /// Sent trade numbers whose token is in neither the pending nor the credited hash.
    pub tokens_missing: u64,
    /// Rewards a killed SDK host answered before their token write (deferred writes)
    /// or held unanswered, whose token never reached the store and which nothing
    /// credited: they died with the host (`lost_answered + lost_unanswered`).
    pub lost_with_host: u64,
    /// Of them, calls the host had answered (the user was shown the reward): only
    /// with deferred (or batched, after a failed first attempt) token writes; 0 with
    /// direct ones.
    pub lost_answered: u64,
    /// Of them, calls still unanswered when the host died (the user saw an error).
    pub lost_unanswered: u64,
    /// Rewards marked by a killed SDK host (accepted or in doubt), credited or not.
    pub host_marked: u64,
    /// Send time (Unix ms) of each of them (for the timeline).
    #[serde(skip)]
    pub tokens_missing_sent_ms: Vec<i64>,
    /// Credit time minus send time of every credited trade, ms (for latency figures).
    #[serde(skip)]
    pub credit_delays_ms: Vec<(i64, i64, String)>,
}

impl Reconciliation {
    /// Every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }

    /// The table as text.
    pub fn table(&self) -> String {
        let mut s = format!("{:<18} {:<6} detail\n", "check", "result");
        for c in &self.checks {
            s.push_str(&format!(
                "{:<18} {:<6} {}\n",
                c.name,
                if c.pass { "PASS" } else { "FAIL" },
                c.detail
            ));
        }
        s
    }
}
