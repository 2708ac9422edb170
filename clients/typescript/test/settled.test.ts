// The settled send keeps an in-doubt answer in doubt; malformed rewards are refused here.
import assert from "node:assert/strict";
import { test } from "node:test";
import { inspect } from "node:util";

import { refusal } from "../src/errors.js";
import { AgentClient, InDoubt, InvalidReward, Refused, type Reward, RewardError } from "../src/index.js";

const reward: Reward = {
  tradeNo: "t1",
  user: { userId: "u1" },
  activityId: "a1",
  sceneId: "rain",
  rewardType: "cash",
  amount: 5,
};

/** A client whose sends answer from a list, one answer a call. */
function scripted(codes: string[]): { client: AgentClient; calls: () => number } {
  const client = AgentClient.unix("/nonexistent/agent.sock");
  let calls = 0;
  client.send = async () => {
    const code = codes[Math.min(calls, codes.length - 1)];
    calls += 1;
    throw refusal(code, "m", "", "t1");
  };
  return { client, calls: () => calls };
}

for (const later of ["TOO_MANY_TOKENS", "BACKPRESSURE"]) {
  test(`a settled send stays in doubt once a try was in doubt (then ${later})`, async () => {
    const s = scripted(["SENT_IN_DOUBT", later]);
    await assert.rejects(s.client.sendSettled(reward, 2000), InDoubt);
    assert.ok(s.calls() >= 2);
    s.client.close();
  });
}

test("a settled send refused for good without doubt is refused", async () => {
  const s = scripted(["TOO_MANY_TOKENS"]);
  await assert.rejects(s.client.sendSettled(reward, 1000), Refused);
  assert.equal(s.calls(), 1);
  s.client.close();
});

test("a malformed reward in a batch is refused alone, never answered as issued", async () => {
  const client = AgentClient.unix("/nonexistent/agent.sock", { timeoutMs: 50 });
  const bad = { ...reward, tradeNo: "t2", amount: 1.5 };
  const worse = { ...reward, tradeNo: "t3", user: undefined } as unknown as Reward;
  const answers = await client.sendBatch([bad, worse]);
  assert.ok(answers[0] instanceof InvalidReward);
  assert.equal(answers[0].field, "amount");
  // No agent on that socket: refused or in doubt, never issued.
  assert.ok(answers[1] instanceof RewardError);
  client.close();
});

test("the TCP credential never shows in an inspected client", () => {
  const client = AgentClient.tcp("127.0.0.1:1", "s3cret-token\n");
  assert.ok(!JSON.stringify(client).includes("s3cret"));
  assert.ok(!inspect(client, { showHidden: true, depth: 5 }).includes("s3cret"));
  client.close();
});
