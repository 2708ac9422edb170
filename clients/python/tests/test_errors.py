"""Refusal codes map to the documented classes and resend advice."""

from __future__ import annotations

from reward_agent import InDoubt, InvalidReward, Refused
from reward_agent._errors import refusal
from reward_agent._gen.reward.v1 import agent_pb2


def test_every_code_of_the_contract_has_its_class():
    want = {
        "INVALID_REWARD": (InvalidReward, False),
        "UNKNOWN_REWARD_TYPE": (InvalidReward, False),
        "BACKPRESSURE": (Refused, True),
        "CLOSING": (Refused, True),
        "TOO_MANY_TOKENS": (Refused, False),
        "SEAL_FAILED": (Refused, False),
        "STORE_FAILED": (InDoubt, True),
        "SENT_IN_DOUBT": (InDoubt, True),
    }
    codes = [n for n in agent_pb2.AgentErrorCode.keys() if n != "AGENT_ERROR_CODE_UNSPECIFIED"]
    assert sorted(codes) == sorted(want), "a code of the .proto has no class here, or the reverse"
    for code, (cls, resend) in want.items():
        e = refusal(code, "m", "", "t1")
        assert type(e) is cls, code
        assert e.resend is resend, code
        assert e.trade_no == "t1"


def test_an_unknown_code_from_a_newer_agent_is_in_doubt():
    e = refusal("SOMETHING_NEW", "m", "", "t1")
    assert isinstance(e, InDoubt) and e.resend


def test_a_reply_with_a_code_number_this_client_does_not_know_is_in_doubt():
    from reward_agent._client import _answer

    reply = agent_pb2.SendRewardReply(error=agent_pb2.AgentError(code=99, message="new"))
    e = _answer(reply, "t1")
    assert isinstance(e, InDoubt) and e.code == "CODE_99" and e.resend
