/**
 * Send rewards from a Node.js service through the host's reward agent.
 *
 * The agent (reward-agent) runs the pipeline's SDK on each host; this package is a
 * thin client of its gRPC contract (reward.v1.RewardAgent, docs/api.md):
 *
 * ```ts
 * import { AgentClient, RedEnvelopeRain } from "reward-agent-client";
 *
 * const agent = AgentClient.unix("/run/reward-agent/agent.sock");
 * const rain = new RedEnvelopeRain("cny2027", "cash");
 * const issued = await agent.sendSettled(rain.grab({ userId: "u42" }, 3, 888));
 * console.log(issued.token); // give it to the user
 * ```
 *
 * A reward answered is durable and credited exactly once. A refusal is a typed error
 * (InvalidReward, Refused, InDoubt); an InDoubt reward is resent with the same trade
 * number (`sendSettled` does it), which never makes a second reward.
 */
export { AgentClient, DEFAULT_TIMEOUT_MS, MAX_BATCH } from "./client.js";
export type { ClientOptions, HeldBy, Issued } from "./client.js";
export { InDoubt, InvalidReward, Refused, RewardError } from "./errors.js";
export { CardCollection, Fireworks, RedEnvelopeRain, tradeNo } from "./scenes.js";
export type { Reward, User } from "./scenes.js";
