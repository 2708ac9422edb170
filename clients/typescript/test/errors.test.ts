// Refusal codes map to the documented classes and resend advice.
import assert from "node:assert/strict";
import { test } from "node:test";
import * as grpc from "@grpc/grpc-js";

import { answer, transport } from "../src/client.js";
import { refusal } from "../src/errors.js";
import { AgentErrorCode } from "../src/gen/reward/v1/AgentErrorCode.js";
import { InDoubt, InvalidReward, Refused, type RewardError } from "../src/index.js";

test("every code of the contract has its class", () => {
  const want: Record<string, [typeof RewardError, boolean]> = {
    INVALID_REWARD: [InvalidReward, false],
    UNKNOWN_REWARD_TYPE: [InvalidReward, false],
    BACKPRESSURE: [Refused, true],
    CLOSING: [Refused, true],
    TOO_MANY_TOKENS: [Refused, false],
    SEAL_FAILED: [Refused, false],
    STORE_FAILED: [InDoubt, true],
    SENT_IN_DOUBT: [InDoubt, true],
  };
  const codes = Object.keys(AgentErrorCode).filter((c) => c !== "AGENT_ERROR_CODE_UNSPECIFIED");
  assert.deepEqual(
    codes.sort(),
    Object.keys(want).sort(),
    "a code of the .proto has no class here, or the reverse",
  );
  for (const [code, [Class, resend]] of Object.entries(want)) {
    const e = refusal(code, "m", "", "t1");
    assert.equal(e.constructor, Class, code);
    assert.equal(e.resend, resend, code);
    assert.equal(e.tradeNo, "t1");
  }
});

test("a code number this client does not know is in doubt", () => {
  const e = answer(
    { result: "error", issued: null, error: { code: 99 as never, message: "new", field: "" } },
    "t1",
  );
  assert.ok(e instanceof InDoubt);
  assert.equal(e.code, "CODE_99");
  assert.ok(e.resend);
});

test("an empty reply is in doubt", () => {
  const e = answer({ issued: null, error: null }, "t1");
  assert.ok(e instanceof InDoubt);
});

test("a failed call is in doubt unless the agent refused the message", () => {
  const cases: [grpc.status, string, typeof RewardError][] = [
    [grpc.status.DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED", InDoubt],
    [grpc.status.UNAVAILABLE, "UNAVAILABLE", InDoubt],
    [grpc.status.INTERNAL, "INTERNAL", InDoubt],
    [grpc.status.CANCELLED, "CANCELLED", InDoubt],
    [grpc.status.UNAUTHENTICATED, "UNAUTHENTICATED", Refused],
    [grpc.status.INVALID_ARGUMENT, "INVALID_ARGUMENT", InvalidReward],
    [grpc.status.OUT_OF_RANGE, "OUT_OF_RANGE", InvalidReward],
  ];
  for (const [code, name, Class] of cases) {
    const err = Object.assign(new Error("x"), { code, details: "x", metadata: new grpc.Metadata() });
    const e = transport(err, "t1");
    assert.equal(e.constructor, Class, name);
    assert.equal(e.code, name);
  }
  assert.ok(transport(new Error("plain"), "t1") instanceof InDoubt);
});
