//! Why a reward left the normal path: the `reason` string of a
//! [`DeadLetter`](crate::v1::DeadLetter), typed.
//!
//! The wire keeps a string (old letters stay readable, and a reader of a newer
//! version's letter still sees the text); code that writes or sorts letters uses
//! [`DeadLetterReason`], so a reason is never misspelt and each has one home topic.

/// Why a message became a dead letter or a failure record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeadLetterReason {
    /// The payload is not a `RewardEvent` (dead-letter topic: fix and replay).
    Decode,
    /// The event breaks a rule the service checks (ids, amount, scene).
    Invalid,
    /// The reward type is not one the SDK's routing declares.
    UnknownType,
    /// Every retry of a retryable failure was spent (dead-letter topic).
    MaxRetries,
    /// The trade number was already used for another reward.
    Conflict,
    /// The scene's budget is spent.
    BudgetExhausted,
    /// The downstream refused the credit for good (written by the reward service).
    Permanent,
    /// The event does not prove it was issued by a holder of the token keys (no
    /// proof, a proof under an unknown key, or one that does not verify): a record
    /// written into the topic by someone else, or by an SDK too old to sign (dead-letter
    /// topic: replay only after checking where it came from).
    Unproven,
    /// The reward is past its expiry: it is never credited.
    Expired,
}

impl DeadLetterReason {
    /// Every reason, in a fixed order (for metrics and reports).
    pub const ALL: [DeadLetterReason; 9] = [
        Self::Decode,
        Self::Invalid,
        Self::UnknownType,
        Self::MaxRetries,
        Self::Conflict,
        Self::BudgetExhausted,
        Self::Permanent,
        Self::Unproven,
        Self::Expired,
    ];

    /// The wire and metric-label form.
    ///
    /// ```
    /// use proto::reasons::DeadLetterReason;
    /// assert_eq!(DeadLetterReason::MaxRetries.as_str(), "max_retries");
    /// assert_eq!(DeadLetterReason::parse("max_retries"), Some(DeadLetterReason::MaxRetries));
    /// assert_eq!(DeadLetterReason::parse("MAX_RETRIES"), None);
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Decode => "decode",
            Self::Invalid => "invalid",
            Self::UnknownType => "unknown_type",
            Self::MaxRetries => "max_retries",
            Self::Conflict => "conflict",
            Self::BudgetExhausted => "budget_exhausted",
            Self::Permanent => "permanent",
            Self::Unproven => "unproven",
            Self::Expired => "expired",
        }
    }

    /// The reason a wire string names, if any.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// True for letters that go to the dead-letter topic (the message could not be
    /// handled: replay it after a fix); false for the failure topic (the reward was
    /// refused: for operators and reports).
    pub const fn is_dead_letter(self) -> bool {
        matches!(self, Self::Decode | Self::MaxRetries | Self::Unproven)
    }
}

impl std::fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_round_trips_and_has_one_topic() {
        // The wire strings are pinned: letters already on brokers carry them.
        let wire: Vec<&str> = DeadLetterReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            wire,
            [
                "decode",
                "invalid",
                "unknown_type",
                "max_retries",
                "conflict",
                "budget_exhausted",
                "permanent",
                "unproven",
                "expired"
            ]
        );
        for r in DeadLetterReason::ALL {
            assert_eq!(DeadLetterReason::parse(r.as_str()), Some(r));
        }
        let dead: Vec<_> = DeadLetterReason::ALL
            .into_iter()
            .filter(|r| r.is_dead_letter())
            .collect();
        assert_eq!(
            dead,
            [
                DeadLetterReason::Decode,
                DeadLetterReason::MaxRetries,
                DeadLetterReason::Unproven
            ]
        );
        assert_eq!(DeadLetterReason::parse("nope"), None);
    }
}
