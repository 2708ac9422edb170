"""The reward request and the scene helpers, built as the Rust SDK builds them
(``sdk::request``): the trade number of a scene reward is
``activity:scene:round:user``, so the same reward asked for twice always carries the
same one. The vectors in ``clients/conformance/scenarios.json`` keep every client's
helpers equal."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class User:
    """Who wins the reward: the user id, and optionally the device and app."""

    user_id: str
    device_id: str = ""
    app_id: str = ""


@dataclass
class Reward:
    """One reward, as the activity service asks for it. ``trade_no`` is the global
    idempotency key: the same reward always carries the same one."""

    trade_no: str
    user: User | None
    activity_id: str
    scene_id: str
    reward_type: str
    amount: int
    description: str = ""
    extension: dict[str, str] = field(default_factory=dict)


def trade_no(activity_id: str, scene_id: str, round: int, user_id: str) -> str:
    """The trade number of a scene reward: ``activity:scene:round:user``."""
    return f"{activity_id}:{scene_id}:{round}:{user_id}"


def _scene(activity_id: str, scene_id: str, reward_type: str, user: User, round: int, amount: int) -> Reward:
    if round < 0:
        raise ValueError(f"round {round} is negative")
    return Reward(
        trade_no=trade_no(activity_id, scene_id, round, user.user_id),
        user=user,
        activity_id=activity_id,
        scene_id=scene_id,
        reward_type=reward_type,
        amount=amount,
    )


@dataclass(frozen=True)
class RedEnvelopeRain:
    """Red-envelope rain: one reward per user per numbered round."""

    activity_id: str
    reward_type: str
    SCENE = "rain"

    def grab(self, user: User, round: int, amount: int) -> Reward:
        r = _scene(self.activity_id, self.SCENE, self.reward_type, user, round, amount)
        r.description = "red envelope"
        return r


@dataclass(frozen=True)
class CardCollection:
    """Card collection: each draw gives one card; the draw number is the round."""

    activity_id: str
    reward_type: str
    SCENE = "cards"

    def draw(self, user: User, draw: int, card_id: str) -> Reward:
        r = _scene(self.activity_id, self.SCENE, self.reward_type, user, draw, 1)
        r.description = f"card {card_id}"
        r.extension["card"] = card_id
        return r


@dataclass(frozen=True)
class Fireworks:
    """Fireworks: a user wins at most once per slot of the show; the slot is the round."""

    activity_id: str
    reward_type: str
    show_start_ms: int
    slot_ms: int
    SCENE = "fireworks"

    def slot_at(self, now_ms: int) -> int:
        """The slot a moment falls in (0 before the show starts)."""
        return max(now_ms - self.show_start_ms, 0) // max(self.slot_ms, 1)

    def win(self, user: User, now_ms: int, amount: int) -> Reward:
        r = _scene(self.activity_id, self.SCENE, self.reward_type, user, self.slot_at(now_ms), amount)
        r.description = "fireworks"
        return r
