"""Send rewards through the host's reward agent.

The agent (``reward-agent``) runs the pipeline's SDK on each host; this package is a
thin client of its gRPC contract (``reward.v1.RewardAgent``, ``docs/api.md``)::

    from reward_agent import AgentClient, RedEnvelopeRain, User

    with AgentClient.unix("/run/reward-agent/agent.sock") as agent:
        rain = RedEnvelopeRain("cny2027", "cash")
        issued = agent.send(rain.grab(User("u42"), round=3, amount=888))
        print(issued.token)  # give it to the user

A reward answered is durable and credited exactly once. A refusal is a typed
exception (:class:`InvalidReward`, :class:`Refused`, :class:`InDoubt`); an
:class:`InDoubt` reward is resent with the same trade number (``send_settled`` does
it for you), which never makes a second reward.
"""

from reward_agent._client import AgentClient, HeldBy, Issued
from reward_agent._errors import InDoubt, InvalidReward, Refused, RewardError
from reward_agent._scenes import CardCollection, Fireworks, RedEnvelopeRain, Reward, User, trade_no

__all__ = [
    "AgentClient",
    "CardCollection",
    "Fireworks",
    "HeldBy",
    "InDoubt",
    "InvalidReward",
    "Issued",
    "RedEnvelopeRain",
    "Refused",
    "Reward",
    "RewardError",
    "User",
    "trade_no",
]
