//! One credit to perform, and what a downstream answers of one: its receipt, or its
//! status.

/// One credit to perform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credit {
    /// The idempotency key (downstreams that support one get it as such).
    pub trade_no: String,
    /// Who is credited.
    pub user_id: String,
    /// What is credited.
    pub reward_type: String,
    /// How much.
    pub amount: i64,
}

impl From<&crate::claim::Grant> for Credit {
    /// The credit a claimed grant asks of its downstream.
    fn from(g: &crate::claim::Grant) -> Self {
        Credit {
            trade_no: g.trade_no.clone(),
            user_id: g.user_id.clone(),
            reward_type: g.reward_type.clone(),
            amount: g.amount,
        }
    }
}

/// What a successful credit returns (stored as the grant's result).
pub type Receipt = String;

/// What a downstream says of a trade number it was asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreditStatus {
    /// Credited, with its receipt.
    Credited(Receipt),
    /// Never credited (and, the contract says, never will be by an earlier call).
    NotCredited,
}
