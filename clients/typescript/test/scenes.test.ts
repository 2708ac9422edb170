// The scene helpers build what the Rust SDK builds (the shared vectors).
import assert from "node:assert/strict";
import { test } from "node:test";

import { CardCollection, Fireworks, RedEnvelopeRain, type Reward } from "../src/index.js";
import { scenarios, type SceneCase } from "./scenarios.js";

function build(c: SceneCase): Reward {
  const user = { userId: c.user_id };
  switch (c.scene) {
    case "rain":
      return new RedEnvelopeRain(c.activity_id, c.reward_type).grab(user, c.round ?? 0, c.amount ?? 0);
    case "cards":
      return new CardCollection(c.activity_id, c.reward_type).draw(user, c.draw ?? 0, c.card_id ?? "");
    case "fireworks":
      return new Fireworks(c.activity_id, c.reward_type, c.show_start_ms ?? 0, c.slot_ms ?? 0).win(
        user,
        c.now_ms ?? 0,
        c.amount ?? 0,
      );
  }
  throw new Error(`unknown scene ${c.scene}`);
}

test("every scene vector", () => {
  const cases = scenarios().scenes;
  assert.ok(cases.length > 0, "no scene vectors");
  for (const c of cases) {
    const r = build(c);
    assert.deepEqual(
      {
        trade_no: r.tradeNo,
        activity_id: r.activityId,
        scene_id: r.sceneId,
        reward_type: r.rewardType,
        amount: r.amount,
        description: r.description,
        extension: r.extension,
      },
      c.want,
      c.scene,
    );
    assert.equal(r.user?.userId, c.user_id);
  }
});

test("the same reward asked twice carries one trade number", () => {
  const rain = new RedEnvelopeRain("a1", "cash");
  assert.equal(rain.grab({ userId: "u1" }, 2, 5).tradeNo, rain.grab({ userId: "u1" }, 2, 7).tradeNo);
  assert.notEqual(rain.grab({ userId: "u1" }, 2, 5).tradeNo, rain.grab({ userId: "u1" }, 3, 5).tradeNo);
});

test("a negative or fractional round is refused", () => {
  const rain = new RedEnvelopeRain("a1", "cash");
  assert.throws(() => rain.grab({ userId: "u1" }, -1, 5), RangeError);
  assert.throws(() => rain.grab({ userId: "u1" }, 1.5, 5), RangeError);
});
