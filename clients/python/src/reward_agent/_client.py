"""The agent client: one reward or a batch over the agent's Unix socket (or loopback
TCP with a credential), each answer an :class:`Issued` or a typed refusal."""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from reward_agent._errors import InDoubt, InvalidReward, Refused, RewardError, refusal
from reward_agent._gen.reward.v1 import agent_pb2, agent_pb2_grpc, event_pb2
from reward_agent._scenes import Reward

#: The default deadline of one call: the 50 ms a ``send_reward`` may take. An agent
#: slower than that answers in doubt (the call may still succeed there): resend with
#: the same trade number (``send_settled``), or give a longer ``timeout``.
DEFAULT_TIMEOUT_S = 0.05


class HeldBy(enum.Enum):
    """Which store held the reward durably when the agent answered."""

    STORE = "store"
    QUEUE = "queue"
    SPOOL = "spool"
    UNSPECIFIED = "unspecified"


_HELD_BY = {
    agent_pb2.HELD_BY_STORE: HeldBy.STORE,
    agent_pb2.HELD_BY_QUEUE: HeldBy.QUEUE,
    agent_pb2.HELD_BY_SPOOL: HeldBy.SPOOL,
}


@dataclass(frozen=True)
class Issued:
    """A durable reward: give ``token`` to the user."""

    token: str
    trade_no: str
    queue: str
    held_by: HeldBy


_INT64 = range(-(2**63), 2**63)


def _request(r: Reward) -> agent_pb2.SendRewardRequest:
    if not isinstance(r.amount, int) or r.amount not in _INT64:
        # Not an integer protobuf can carry: nothing is sent.
        raise InvalidReward(
            "INVALID_REWARD", f"amount {r.amount!r} is not a 64-bit integer", "amount", r.trade_no
        )
    user = None
    if r.user is not None:
        user = event_pb2.UserInfo(user_id=r.user.user_id, device_id=r.user.device_id, app_id=r.user.app_id)
    return agent_pb2.SendRewardRequest(
        trade_no=r.trade_no,
        user=user,
        activity_id=r.activity_id,
        scene_id=r.scene_id,
        reward_type=r.reward_type,
        amount=r.amount,
        description=r.description,
        extension=dict(r.extension),
    )


def _answer(reply: agent_pb2.SendRewardReply, trade_no: str) -> Issued | RewardError:
    which = reply.WhichOneof("result")
    if which == "issued":
        i = reply.issued
        return Issued(i.token, i.trade_no, i.queue, _HELD_BY.get(i.held_by, HeldBy.UNSPECIFIED))
    if which == "error":
        e = reply.error
        try:
            code = agent_pb2.AgentErrorCode.Name(e.code)
        except ValueError:
            # A code this client does not know yet (a newer agent): in doubt.
            code = f"CODE_{e.code}"
        return refusal(code, e.message, e.field, trade_no)
    return InDoubt("EMPTY_REPLY", "the agent's reply held neither a reward nor an error", "", trade_no)


def _transport(e: grpc.RpcError, trade_no: str) -> RewardError:
    code = e.code() if hasattr(e, "code") else None
    name = code.name if code is not None else "UNKNOWN"
    detail = (e.details() if hasattr(e, "details") else None) or name
    if code == grpc.StatusCode.UNAUTHENTICATED:
        # TCP without the right credential: nothing was done.
        return Refused("UNAUTHENTICATED", detail, "", trade_no)
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE):
        # The message itself was refused (a batch over the limit, over 16 MiB):
        # nothing was done.
        return InvalidReward(name, detail, "", trade_no)
    # Every other failure of the call may come after the agent did its work: in doubt.
    return InDoubt(name, detail, "", trade_no)


class AgentClient:
    """A connection to the host's reward agent. Thread-safe; keep one per process."""

    def __init__(self, channel: grpc.Channel, timeout: float = DEFAULT_TIMEOUT_S, token: str | None = None):
        self._channel = channel
        self._stub = agent_pb2_grpc.RewardAgentStub(channel)
        self.timeout = timeout
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None

    @classmethod
    def unix(cls, socket_path: str, timeout: float = DEFAULT_TIMEOUT_S) -> AgentClient:
        """The agent on its Unix socket (the default; the socket's mode is the credential)."""
        # gRPC's C core names a Unix socket's authority after its path, which is not a
        # valid HTTP/2 authority for the agent's server (it resets the stream): name one.
        channel = grpc.insecure_channel(
            f"unix:{socket_path}", options=[("grpc.default_authority", "localhost")]
        )
        return cls(channel, timeout)

    @classmethod
    def tcp(cls, address: str, token: str, timeout: float = DEFAULT_TIMEOUT_S) -> AgentClient:
        """The agent on loopback TCP, with its credential (``REWARD_AGENT_TOKEN``)."""
        # A credential read from a file often ends with a newline.
        token = (token or "").strip()
        if not token:
            raise ValueError("the agent's TCP listener needs its credential")
        return cls(grpc.insecure_channel(address), timeout, token)

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def send(self, reward: Reward, timeout: float | None = None) -> Issued:
        """Sends one reward; returns it issued or raises a :class:`RewardError`."""
        try:
            reply = self._stub.SendReward(
                _request(reward), timeout=timeout or self.timeout, metadata=self._metadata
            )
        except grpc.RpcError as e:
            raise _transport(e, reward.trade_no) from None
        answer = _answer(reply, reward.trade_no)
        if isinstance(answer, RewardError):
            raise answer
        return answer

    def send_batch(
        self, rewards: Sequence[Reward], timeout: float | None = None
    ) -> list[Issued | RewardError]:
        """Sends up to 1000 rewards in one call; one answer per reward, in order. A
        failed call answers every reward :class:`InDoubt`."""
        requests, refused = [], {}
        for i, r in enumerate(rewards):
            try:
                requests.append(_request(r))
            except InvalidReward as e:
                refused[i] = e
        if refused:
            # Refused here, the rest sent; answers put back in request order.
            sent = [r for i, r in enumerate(rewards) if i not in refused]
            answers = iter(self.send_batch(sent, timeout) if sent else [])
            return [refused[i] if i in refused else next(answers) for i in range(len(rewards))]
        try:
            reply = self._stub.SendRewards(
                agent_pb2.SendRewardsRequest(rewards=requests),
                timeout=timeout or max(self.timeout, 1.0),
                metadata=self._metadata,
            )
        except grpc.RpcError as e:
            return [_transport(e, r.trade_no) for r in rewards]
        if len(reply.replies) != len(rewards):
            return [
                InDoubt(
                    "SHORT_REPLY", f"{len(reply.replies)} answers for {len(rewards)} rewards", "", r.trade_no
                )
                for r in rewards
            ]
        return [_answer(a, r.trade_no) for a, r in zip(reply.replies, rewards)]

    def send_settled(self, reward: Reward, within: float = 5.0, pause: float = 0.05) -> Issued:
        """Sends ``reward`` and resends it, with the same trade number, while its answer
        may be resent (in doubt, back-pressure, a closing agent), for up to ``within``
        seconds, the pause between tries doubling up to 1 s (an agent that is slow
        because it is overloaded is not sent more). Raises the last refusal if none
        settled it, except that once any try was in doubt the answer stays
        :class:`InDoubt`: a later refusal says nothing of the earlier try, which may
        still be credited."""
        until = time.monotonic() + within
        doubt: InDoubt | None = None
        while True:
            try:
                return self.send(reward)
            except RewardError as e:
                if isinstance(e, InDoubt):
                    doubt = e
                if not e.resend or time.monotonic() + pause >= until:
                    if doubt is not None and not isinstance(e, InDoubt):
                        raise doubt from e
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def serving(self) -> bool:
        """Whether the agent takes rewards now."""
        try:
            return self._stub.Health(
                agent_pb2.AgentHealthRequest(), timeout=1.0, metadata=self._metadata
            ).serving
        except grpc.RpcError:
            return False
