"""The scene helpers build what the Rust SDK builds (the shared vectors)."""

from __future__ import annotations

from reward_agent import CardCollection, Fireworks, RedEnvelopeRain, User


def build(case: dict):
    user = User(case["user_id"])
    if case["scene"] == "rain":
        return RedEnvelopeRain(case["activity_id"], case["reward_type"]).grab(
            user, case["round"], case["amount"]
        )
    if case["scene"] == "cards":
        return CardCollection(case["activity_id"], case["reward_type"]).draw(
            user, case["draw"], case["card_id"]
        )
    if case["scene"] == "fireworks":
        show = Fireworks(case["activity_id"], case["reward_type"], case["show_start_ms"], case["slot_ms"])
        return show.win(user, case["now_ms"], case["amount"])
    raise AssertionError(f"unknown scene {case['scene']}")


def test_every_scene_vector(scenarios):
    assert scenarios["scenes"], "no scene vectors"
    for case in scenarios["scenes"]:
        r = build(case)
        want = case["want"]
        got = {
            "trade_no": r.trade_no,
            "activity_id": r.activity_id,
            "scene_id": r.scene_id,
            "reward_type": r.reward_type,
            "amount": r.amount,
            "description": r.description,
            "extension": r.extension,
        }
        assert got == want, case
        assert r.user.user_id == case["user_id"]


def test_the_same_reward_asked_twice_carries_one_trade_number():
    rain = RedEnvelopeRain("a1", "cash")
    assert rain.grab(User("u1"), 2, 5).trade_no == rain.grab(User("u1"), 2, 7).trade_no
    assert rain.grab(User("u1"), 2, 5).trade_no != rain.grab(User("u1"), 3, 5).trade_no
