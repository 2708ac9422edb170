/**
 * The agent client: one reward or a batch over the agent's Unix socket (or loopback
 * TCP with a credential), each answer an {@link Issued} or a typed refusal.
 */
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { fileURLToPath } from "node:url";

import { InDoubt, InvalidReward, Refused, RewardError, refusal } from "./errors.js";
import type { ProtoGrpcType } from "./gen/agent.js";
import type { RewardAgentClient } from "./gen/reward/v1/RewardAgent.js";
import type { SendRewardReply__Output } from "./gen/reward/v1/SendRewardReply.js";
import type { SendRewardRequest } from "./gen/reward/v1/SendRewardRequest.js";
import type { Reward } from "./scenes.js";

/**
 * A call's default deadline: the 50 ms a send_reward may take. An agent slower than
 * that answers in doubt (the call may still succeed there): resend with the same trade
 * number (`sendSettled`), or give a longer `timeoutMs`.
 */
export const DEFAULT_TIMEOUT_MS = 50;

/** The most rewards one `sendBatch` takes; more are refused whole (INVALID_ARGUMENT). */
export const MAX_BATCH = 1000;

/** Which store held the reward durably when the agent answered. */
export type HeldBy = "store" | "queue" | "spool" | "unspecified";

/** A durable reward: give `token` to the user. */
export interface Issued {
  token: string;
  tradeNo: string;
  queue: string;
  heldBy: HeldBy;
}

export interface ClientOptions {
  /** A call's deadline (DEFAULT_TIMEOUT_MS); a batch's is at least 1 s. */
  timeoutMs?: number;
}

// The contract, loaded from the package's copy of the .proto files (proto/).
const PROTO_DIR = fileURLToPath(new URL("../../proto", import.meta.url));
const definition = protoLoader.loadSync("reward/v1/agent.proto", {
  includeDirs: [PROTO_DIR],
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
});
const loaded = grpc.loadPackageDefinition(definition) as unknown as ProtoGrpcType;

const HELD_BY: Record<string, HeldBy> = {
  HELD_BY_STORE: "store",
  HELD_BY_QUEUE: "queue",
  HELD_BY_SPOOL: "spool",
};

function request(r: Reward): SendRewardRequest {
  if (!Number.isSafeInteger(r.amount)) {
    // Not an integer protobuf can carry exactly: nothing is sent.
    throw new InvalidReward(
      "INVALID_REWARD",
      `amount ${r.amount} is not a safe integer`,
      "amount",
      r.tradeNo,
    );
  }
  return {
    trade_no: r.tradeNo,
    user:
      r.user == null
        ? null
        : { user_id: r.user.userId, device_id: r.user.deviceId ?? "", app_id: r.user.appId ?? "" },
    activity_id: r.activityId,
    scene_id: r.sceneId,
    reward_type: r.rewardType,
    amount: r.amount,
    description: r.description ?? "",
    extension: r.extension ?? {},
  };
}

/** One reward's answer: issued, or the refusal. */
export function answer(reply: SendRewardReply__Output, tradeNo: string): Issued | RewardError {
  if (reply.result === "issued" && reply.issued) {
    const i = reply.issued;
    return {
      token: i.token,
      tradeNo: i.trade_no,
      queue: i.queue,
      heldBy: HELD_BY[String(i.held_by)] ?? "unspecified",
    };
  }
  if (reply.result === "error" && reply.error) {
    const e = reply.error;
    // A code number this client does not know (a newer agent) stays a number.
    return refusal(e.code, e.message, e.field, tradeNo);
  }
  return new InDoubt("EMPTY_REPLY", "the agent's reply held neither a reward nor an error", "", tradeNo);
}

/** A call that failed as a call. */
export function transport(e: grpc.ServiceError | Error, tradeNo: string): RewardError {
  const code = "code" in e && typeof e.code === "number" ? e.code : grpc.status.UNKNOWN;
  // A number the protocol does not define is UNKNOWN, as every client names it.
  const name = grpc.status[code] ?? "UNKNOWN";
  const detail = ("details" in e && e.details) || e.message || name;
  if (code === grpc.status.UNAUTHENTICATED) {
    // TCP without the right credential: nothing was done.
    return new Refused(name, detail, "", tradeNo);
  }
  if (code === grpc.status.INVALID_ARGUMENT || code === grpc.status.OUT_OF_RANGE) {
    // The message itself was refused (a batch over the limit, over 16 MiB).
    return new InvalidReward(name, detail, "", tradeNo);
  }
  // Every other failure of the call may come after the agent did its work.
  return new InDoubt(name, detail, "", tradeNo);
}

/** A connection to the host's reward agent; keep one per process. */
export class AgentClient {
  /** A call's deadline in ms. */
  timeoutMs: number;

  readonly #stub: RewardAgentClient;
  // A true private field: the credential never shows in a logged or inspected client.
  readonly #metadata: grpc.Metadata;

  private constructor(stub: RewardAgentClient, metadata: grpc.Metadata, options: ClientOptions) {
    this.#stub = stub;
    this.#metadata = metadata;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  /** The agent on its Unix socket (the default; the socket's file mode is the credential). */
  static unix(socketPath: string, options: ClientOptions = {}): AgentClient {
    const stub = new loaded.reward.v1.RewardAgent(`unix:${socketPath}`, grpc.credentials.createInsecure(), {
      // Any plain host name as the HTTP/2 authority: the agent refuses a path there.
      "grpc.default_authority": "localhost",
      "grpc.max_receive_message_length": 16 << 20,
    });
    return new AgentClient(stub, new grpc.Metadata(), options);
  }

  /** The agent on loopback TCP (host:port), with its credential (REWARD_AGENT_TOKEN). */
  static tcp(address: string, token: string, options: ClientOptions = {}): AgentClient {
    // A credential read from a file often ends with a newline.
    token = (token ?? "").trim();
    if (!token) throw new TypeError("the agent's TCP listener needs its credential");
    const stub = new loaded.reward.v1.RewardAgent(address, grpc.credentials.createInsecure(), {
      "grpc.max_receive_message_length": 16 << 20,
    });
    const metadata = new grpc.Metadata();
    metadata.set("authorization", `Bearer ${token}`);
    return new AgentClient(stub, metadata, options);
  }

  /** Closes the connection; calls in flight end in doubt. */
  close(): void {
    this.#stub.close();
  }

  /** Sends one reward: resolves once it is durable, rejects with a {@link RewardError}. */
  send(reward: Reward, options: ClientOptions = {}): Promise<Issued> {
    return new Promise((resolve, reject) => {
      let req: SendRewardRequest;
      try {
        req = request(reward);
      } catch (e) {
        reject(
          e instanceof RewardError
            ? e
            : new InvalidReward("INVALID_REWARD", String(e), "", reward?.tradeNo ?? ""),
        );
        return;
      }
      const deadline = Date.now() + (options.timeoutMs ?? this.timeoutMs);
      this.#stub.SendReward(req, this.#metadata, { deadline }, (err, reply) => {
        if (err || !reply) {
          reject(transport(err ?? new Error("no reply"), reward.tradeNo));
          return;
        }
        const a = answer(reply, reward.tradeNo);
        if (a instanceof RewardError) reject(a);
        else resolve(a);
      });
    });
  }

  /**
   * Sends up to {@link MAX_BATCH} rewards in one call: one answer per reward, in
   * order. A failed call answers every reward in doubt (or invalid, when the agent
   * refused the whole message).
   */
  sendBatch(rewards: Reward[], options: ClientOptions = {}): Promise<Array<Issued | RewardError>> {
    const answers: Array<Issued | RewardError | undefined> = new Array(rewards.length);
    const sent: number[] = [];
    const reqs: SendRewardRequest[] = [];
    rewards.forEach((r, i) => {
      try {
        reqs.push(request(r));
        sent.push(i);
      } catch (e) {
        // Never sent: refused here (a non-integer amount, a malformed reward object).
        answers[i] =
          e instanceof RewardError ? e : new InvalidReward("INVALID_REWARD", String(e), "", r?.tradeNo ?? "");
      }
    });
    const deadline = Date.now() + Math.max(options.timeoutMs ?? this.timeoutMs, 1000);
    return new Promise((resolve) => {
      this.#stub.SendRewards({ rewards: reqs }, this.#metadata, { deadline }, (err, reply) => {
        sent.forEach((i, k) => {
          const tradeNo = rewards[i].tradeNo;
          if (err || !reply) answers[i] = transport(err ?? new Error("no reply"), tradeNo);
          else if (reply.replies.length !== reqs.length)
            answers[i] = new InDoubt(
              "SHORT_REPLY",
              `${reply.replies.length} answers for ${reqs.length} rewards`,
              "",
              tradeNo,
            );
          else answers[i] = answer(reply.replies[k], tradeNo);
        });
        resolve(answers as Array<Issued | RewardError>);
      });
    });
  }

  /**
   * Sends `reward` and resends it, with the same trade number, while its answer may
   * be resent (in doubt, back-pressure, a closing agent), for up to `withinMs`; the
   * pause between tries starts at 50 ms and doubles up to 1 s, so an overloaded agent
   * is not sent more. Rejects with the last refusal if none settled it, except that
   * once any try was in doubt the answer stays {@link InDoubt}: a later refusal says
   * nothing of the earlier try, which may still be credited.
   */
  async sendSettled(reward: Reward, withinMs = 5000): Promise<Issued> {
    const until = Date.now() + withinMs;
    let pause = 50;
    let doubt: InDoubt | undefined;
    for (;;) {
      try {
        return await this.send(reward);
      } catch (e) {
        if (e instanceof InDoubt) doubt = e;
        if (!(e instanceof RewardError) || !e.resend || Date.now() + pause >= until) {
          throw doubt !== undefined && !(e instanceof InDoubt) ? doubt : e;
        }
      }
      await new Promise((r) => setTimeout(r, pause));
      pause = Math.min(pause * 2, 1000);
    }
  }

  /** Whether the agent takes rewards now. */
  serving(): Promise<boolean> {
    return new Promise((resolve) => {
      this.#stub.Health({}, this.#metadata, { deadline: Date.now() + 1000 }, (err, reply) =>
        resolve(!err && reply?.serving === true),
      );
    });
  }
}
