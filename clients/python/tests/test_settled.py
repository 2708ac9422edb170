"""The settled send keeps an in-doubt answer in doubt; bad amounts are refused here."""

from __future__ import annotations

import pytest

from reward_agent import AgentClient, InDoubt, InvalidReward, Refused, Reward, User
from reward_agent._errors import refusal


class Scripted(AgentClient):
    """A client whose sends answer from a list, one answer a call."""

    def __init__(self, answers):
        self.answers, self.calls, self.timeout = answers, 0, 1.0

    def send(self, reward, timeout=None):
        a = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        raise a


def reward() -> Reward:
    return Reward("t1", User("u1"), "a1", "rain", "cash", 5)


@pytest.mark.parametrize("later", ["TOO_MANY_TOKENS", "BACKPRESSURE"])
def test_a_settled_send_stays_in_doubt_once_a_try_was_in_doubt(later):
    c = Scripted([refusal("SENT_IN_DOUBT", "m", "", "t1"), refusal(later, "m", "", "t1")])
    with pytest.raises(InDoubt):
        c.send_settled(reward(), within=2.0, pause=0.01)
    assert c.calls >= 2


def test_a_settled_send_refused_for_good_without_doubt_is_refused():
    c = Scripted([refusal("TOO_MANY_TOKENS", "m", "", "t1")])
    with pytest.raises(Refused):
        c.send_settled(reward(), within=1.0, pause=0.01)
    assert c.calls == 1


def test_an_amount_outside_64_bits_is_refused_before_sending():
    from reward_agent._client import _request

    r = reward()
    r.amount = 2**63
    with pytest.raises(InvalidReward) as e:
        _request(r)
    assert e.value.field == "amount"


def test_tcp_needs_a_credential():
    with pytest.raises(ValueError):
        AgentClient.tcp("127.0.0.1:1", " \n")
