"""Typed refusals. Classify by class (or ``code``), never by message.

=================  ===================================================  =========
class              codes                                                resend?
=================  ===================================================  =========
InvalidReward      INVALID_REWARD, UNKNOWN_REWARD_TYPE (``field`` set)  no
Refused            BACKPRESSURE, CLOSING (nothing kept)                 yes
Refused            TOO_MANY_TOKENS, SEAL_FAILED (nothing kept)          no
InDoubt            STORE_FAILED, SENT_IN_DOUBT, and every transport failure  yes, SAME trade_no
=================  ===================================================  =========
"""

from __future__ import annotations


class RewardError(Exception):
    """A reward the agent did not answer as durable."""

    def __init__(self, code: str, message: str, field: str = "", trade_no: str = ""):
        super().__init__(f"{code}: {message}" + (f" (field {field})" if field else ""))
        self.code = code
        self.field = field
        self.trade_no = trade_no

    @property
    def resend(self) -> bool:
        """Whether sending the same reward again (same trade number) may succeed."""
        return False


class InvalidReward(RewardError):
    """A field breaks the limits (``field`` names it) or the reward type is unknown.
    Nothing was kept; a corrected reward may reuse the trade number."""


class Refused(RewardError):
    """Refused before anything was kept: BACKPRESSURE and CLOSING may be resent later,
    TOO_MANY_TOKENS and SEAL_FAILED may not."""

    @property
    def resend(self) -> bool:
        return self.code in ("BACKPRESSURE", "CLOSING")


class InDoubt(RewardError):
    """The reward may be durable (and then it is credited). Send it again with the
    SAME trade number for a definite answer; that never makes a second reward."""

    @property
    def resend(self) -> bool:
        return True


_CLASSES = {
    "INVALID_REWARD": InvalidReward,
    "UNKNOWN_REWARD_TYPE": InvalidReward,
    "BACKPRESSURE": Refused,
    "CLOSING": Refused,
    "TOO_MANY_TOKENS": Refused,
    "SEAL_FAILED": Refused,
    "STORE_FAILED": InDoubt,
    "SENT_IN_DOUBT": InDoubt,
}


def refusal(code: str, message: str, field: str, trade_no: str) -> RewardError:
    """The exception for an ``AgentError`` code; an unknown code (a newer agent) is in
    doubt, the one answer that is always safe."""
    return _CLASSES.get(code, InDoubt)(code, message, field, trade_no)
