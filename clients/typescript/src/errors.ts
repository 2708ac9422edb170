/**
 * Typed refusals. Classify by class (or `code`), never by message.
 *
 * | class         | codes                                                  | resend?          |
 * | ------------- | ------------------------------------------------------ | ---------------- |
 * | InvalidReward | INVALID_REWARD, UNKNOWN_REWARD_TYPE (`field` set)       | no               |
 * | Refused       | BACKPRESSURE, CLOSING (nothing kept)                   | yes, later       |
 * | Refused       | TOO_MANY_TOKENS, SEAL_FAILED, UNAUTHENTICATED          | no               |
 * | InDoubt       | STORE_FAILED, SENT_IN_DOUBT, every failed call, any code this client does not know | yes, SAME trade number |
 */

/** A reward the agent did not answer as durable. */
export class RewardError extends Error {
  constructor(
    /** The agent's code (INVALID_REWARD, ...), a gRPC status name, or CODE_<n>. */
    readonly code: string,
    message: string,
    /** The offending field of an invalid reward (user.user_id, amount, ...). */
    readonly field: string = "",
    readonly tradeNo: string = "",
  ) {
    super(`${code}: ${message}${field ? ` (field ${field})` : ""}`);
    this.name = new.target.name;
  }

  /** Whether sending the same reward again, with the same trade number, may succeed. */
  get resend(): boolean {
    return false;
  }
}

/**
 * A field breaks the limits (`field` names it) or the reward type is unknown. Nothing
 * was kept; a corrected reward may reuse the trade number.
 */
export class InvalidReward extends RewardError {}

/**
 * Refused before anything was kept: BACKPRESSURE and CLOSING may be resent later,
 * TOO_MANY_TOKENS, SEAL_FAILED and UNAUTHENTICATED may not.
 */
export class Refused extends RewardError {
  override get resend(): boolean {
    return this.code === "BACKPRESSURE" || this.code === "CLOSING";
  }
}

/**
 * The reward may be durable (and then it is credited). Send it again with the SAME
 * trade number for a definite answer; that never makes a second reward.
 */
export class InDoubt extends RewardError {
  override get resend(): boolean {
    return true;
  }
}

const CLASSES: Record<string, typeof RewardError> = {
  INVALID_REWARD: InvalidReward,
  UNKNOWN_REWARD_TYPE: InvalidReward,
  BACKPRESSURE: Refused,
  CLOSING: Refused,
  TOO_MANY_TOKENS: Refused,
  SEAL_FAILED: Refused,
  STORE_FAILED: InDoubt,
  SENT_IN_DOUBT: InDoubt,
};

/**
 * The error for an AgentError code (its name, or its number when this client does
 * not know it): an unknown code (a newer agent) is in doubt, the one answer that is
 * always safe.
 */
export function refusal(code: string | number, message: string, field: string, tradeNo: string): RewardError {
  const name = typeof code === "number" ? `CODE_${code}` : code;
  const Class = Object.hasOwn(CLASSES, name) ? CLASSES[name] : InDoubt;
  return new Class(name, message, field, tradeNo);
}
