// The shared scenarios (clients/conformance/scenarios.json) against a real agent. Run by
// the stack tier's harness (agent/tests/clients.rs, through ops/test), which starts the
// agent and sets the variables of clients/conformance/README.md; without them every
// test here fails, never skips.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, openSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { AgentClient, type Issued, type Reward, RewardError } from "../src/index.js";
import { scenarios } from "./scenarios.js";

const LANG = "typescript";

function need(name: string): string {
  const v = process.env[name];
  if (!v)
    throw new Error(`${name} is not set: run the client tests through ops/test (agent/tests/clients.rs)`);
  return v;
}

const sc = scenarios();
const timeoutMs = Number(process.env.CONFORMANCE_TIMEOUT_S ?? "5") * 1000;

function tag(): string {
  return `${need("CONFORMANCE_TAG")}-${LANG}`;
}

function agent(): AgentClient {
  return AgentClient.unix(need("REWARD_AGENT_SOCKET"), { timeoutMs });
}

/** The books' sent line (tools/src/books/sent.rs) and the token, for the harness. */
function record(r: Reward, issued: Issued): void {
  const out = need("CONFORMANCE_OUT");
  mkdirSync(out, { recursive: true });
  const stored = issued.heldBy === "store" ? 1 : 0;
  appendFileSync(
    join(out, `${LANG}.sent.tsv`),
    [
      r.tradeNo,
      r.user?.userId,
      r.activityId,
      r.sceneId,
      r.rewardType,
      r.amount,
      Date.now(),
      stored,
      0,
      issued.token,
    ].join("\t") + "\n",
  );
}

function expand(v: unknown): unknown {
  if (v !== null && typeof v === "object" && !Array.isArray(v)) {
    const o = v as Record<string, unknown>;
    const keys = Object.keys(o);
    if (keys.length === 2 && typeof o.repeat === "string" && typeof o.count === "number") {
      return o.repeat.repeat(o.count);
    }
    return Object.fromEntries(keys.map((k) => [k, expand(o[k])]));
  }
  return v;
}

/** The scenarios' base reward for `user`, with `set` laid over it. */
function reward(tg: string, user: string, set: Record<string, unknown> = {}): Reward {
  const doc: Record<string, unknown> = structuredClone(sc.base);
  for (const [k, v] of Object.entries(set)) doc[k] = expand(v);
  const fill = (s: unknown) =>
    String(s ?? "")
      .replaceAll("{tag}", tg)
      .replaceAll("{user}", user);
  const u = doc.user as Record<string, string> | null;
  return {
    tradeNo: fill(doc.trade_no),
    user: u === null ? null : { userId: fill(u.user_id), deviceId: u.device_id ?? "", appId: u.app_id ?? "" },
    activityId: fill(doc.activity_id),
    sceneId: String(doc.scene_id),
    rewardType: String(doc.reward_type),
    amount: doc.amount as number,
    description: String(doc.description),
    extension: doc.extension as Record<string, string>,
  };
}

test("one reward is issued with a token", async () => {
  const c = agent();
  try {
    const r = reward(tag(), "u-one");
    const issued = await c.send(r);
    assert.equal(issued.tradeNo, r.tradeNo);
    assert.ok(issued.token);
    assert.notEqual(issued.heldBy, "unspecified");
    record(r, issued);
  } finally {
    c.close();
  }
});

test("a batch answers each reward in order", async () => {
  const c = agent();
  try {
    const rewards = Array.from({ length: sc.batch.size }, (_, i) => reward(tag(), `u-batch-${i}`));
    const answers = await c.sendBatch(rewards);
    assert.equal(answers.length, rewards.length);
    answers.forEach((a, i) => {
      if (a instanceof RewardError) throw a;
      assert.equal(a.tradeNo, rewards[i].tradeNo);
      record(rewards[i], a);
    });
  } finally {
    c.close();
  }
});

test("a repeated trade number is answered again and credited once", async () => {
  const c = agent();
  try {
    const r = reward(tag(), "u-repeat");
    const first = await c.send(r);
    const again = await c.send(r);
    assert.deepEqual([first.tradeNo, again.tradeNo], [r.tradeNo, r.tradeNo]);
    record(r, first);
  } finally {
    c.close();
  }
});

test("every bad input is refused with its code and field", async () => {
  const c = agent();
  try {
    assert.ok(sc.bad_inputs.length > 0);
    for (const bad of sc.bad_inputs) {
      await assert.rejects(c.send(reward(tag(), "u-bad", bad.set)), (e: unknown) => {
        assert.ok(e instanceof RewardError, `${bad.name}: ${String(e)}`);
        assert.deepEqual([e.code, e.field], [bad.code, bad.field], `${bad.name}: ${e.message}`);
        assert.equal(e.resend, false, bad.name);
        return true;
      });
    }
  } finally {
    c.close();
  }
});

test("a batch over the limit is refused whole", async () => {
  const c = agent();
  try {
    const rewards = Array.from({ length: sc.over_batch.size }, (_, i) => reward(tag(), `u-over-${i}`));
    for (const a of await c.sendBatch(rewards)) {
      assert.ok(a instanceof RewardError && a.code === "INVALID_ARGUMENT" && !a.resend, String(a));
    }
  } finally {
    c.close();
  }
});

/** An agent of the test's own, on a private socket and spool. */
class OwnAgent {
  readonly exited: Promise<number | null>;
  private constructor(
    readonly proc: ChildProcess,
    readonly socket: string,
    readonly log: string,
  ) {
    this.exited = new Promise((resolve) => proc.on("exit", (code) => resolve(code)));
  }

  static async start(dir: string): Promise<OwnAgent> {
    const socket = join(dir, "kill.sock");
    const log = join(dir, "agent.log");
    const out = openSync(log, "a");
    const proc = spawn(need("REWARD_AGENT_BIN"), ["--config", need("REWARD_AGENT_CONFIG")], {
      env: {
        ...process.env,
        REWARD_AGENT__LISTEN__SOCKET: socket,
        REWARD_AGENT__ADMIN__ADDR: "127.0.0.1:0",
        REWARD_SDK__SPOOL__DIR: join(dir, "spool"),
      },
      stdio: ["ignore", out, out],
    });
    const a = new OwnAgent(proc, socket, log);
    let gone = false;
    void a.exited.then(() => (gone = true));
    const until = Date.now() + 60_000;
    while (Date.now() < until) {
      if (gone) throw new Error(`the agent exited; log ${log}`);
      if (existsSync(socket)) {
        const c = AgentClient.unix(socket, { timeoutMs: 1000 });
        const up = await c.serving();
        c.close();
        if (up) return a;
      }
      await sleep(50);
    }
    proc.kill("SIGKILL");
    throw new Error(`the agent did not serve within 60 s; log ${log}`);
  }

  /** Sends `signal` and waits up to a minute for the exit code. */
  async stop(signal: NodeJS.Signals): Promise<number | null> {
    this.proc.kill(signal);
    // Unreferenced: a pending timer must not keep the test process alive.
    const late = sleep(60_000, undefined, { ref: false }).then(() => {
      throw new Error(`the agent did not exit within 60 s of ${signal}; log ${this.log}`);
    });
    return Promise.race([this.exited, late]);
  }
}

test("an agent killed mid-batch loses no answered reward", async (t) => {
  // SIGKILL while batches flow, restart, resend every unanswered reward with its trade
  // number: every answered one is recorded for the harness, which checks each is
  // credited once.
  const k = sc.kill;
  const dir = mkdtempSync(join(tmpdir(), "ra-ts-")); // short: a socket path fits in 108 bytes
  const tg = tag();
  const rewards = Array.from({ length: k.rewards }, (_, i) => reward(tg, `u-kill-${i}`));
  const batches: Reward[][] = [];
  for (let i = 0; i < rewards.length; i += k.batch) batches.push(rewards.slice(i, i + k.batch));
  const answered = new Map<string, Issued>();
  const unanswered: Reward[] = [];
  const forGood: string[] = [];
  const settle = (batch: Reward[], answers: Array<Issued | RewardError>) =>
    answers.forEach((a, i) => {
      if (!(a instanceof RewardError)) answered.set(batch[i].tradeNo, a);
      else if (a.resend) unanswered.push(batch[i]);
      else forGood.push(`${batch[i].tradeNo}: ${a.message}`);
    });

  let own = await OwnAgent.start(dir);
  const client = AgentClient.unix(own.socket, { timeoutMs: 30_000 });
  try {
    // The batches before the kill, one after another, as a service sends them.
    for (const b of batches.slice(0, k.kill_after_batches)) settle(b, await client.sendBatch(b));
    // The rest from several senders at once; the agent is killed once one of them was
    // answered, so the kill lands while the agent is taking batches, and the batches
    // not sent by then find it gone.
    const todo = batches.slice(k.kill_after_batches);
    let firstAnswer: () => void = () => {};
    const answeredOnce = new Promise<void>((resolve) => (firstAnswer = resolve));
    const senders = Array.from({ length: k.senders }, async () => {
      for (let b = todo.shift(); b; b = todo.shift()) {
        settle(b, await client.sendBatch(b));
        firstAnswer();
      }
    });
    await answeredOnce;
    assert.notEqual(await own.stop("SIGKILL"), 0);
    await Promise.all(senders);
  } finally {
    client.close();
    own.proc.kill("SIGKILL"); // killed above already unless the test failed before
  }
  assert.deepEqual(forGood, [], "refused for good while the agent was up or killed");
  assert.ok(unanswered.length > 0, "the kill cut no call: the scenario proved nothing");

  own = await OwnAgent.start(dir);
  const restarted = own;
  try {
    const c = AgentClient.unix(restarted.socket, { timeoutMs: 10_000 });
    try {
      for (const r of unanswered) answered.set(r.tradeNo, await c.sendSettled(r, 30_000));
    } finally {
      c.close();
    }
    const stopping = Date.now();
    assert.equal(await restarted.stop("SIGTERM"), 0, `the agent did not stop cleanly; log ${restarted.log}`);
    t.diagnostic(
      `${rewards.length - unanswered.length} answered before the kill, ${unanswered.length} resent after it; ` +
        `the restarted agent stopped in ${Date.now() - stopping} ms`,
    );
  } finally {
    restarted.proc.kill("SIGKILL"); // a failed test leaves no agent behind (a no-op once it exited)
  }
  assert.equal(answered.size, rewards.length);
  for (const r of rewards) {
    const issued = answered.get(r.tradeNo);
    assert.ok(issued);
    record(r, issued);
  }
  rmSync(dir, { recursive: true, force: true }); // kept, with the agent's log, when the test fails
});
