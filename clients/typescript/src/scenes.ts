/**
 * The reward request and the scene helpers, built as the Rust SDK builds them: the
 * trade number of a scene reward is `activity:scene:round:user`, so the same reward
 * asked for twice always carries the same one. The vectors in
 * clients/conformance/scenarios.json keep every client's helpers equal.
 */

/** Who wins a reward: the user id, and optionally the device and app. */
export interface User {
  userId: string;
  deviceId?: string;
  appId?: string;
}

/**
 * One reward, as the activity service asks for it. `tradeNo` is the global
 * idempotency key: the same reward always carries the same one.
 */
export interface Reward {
  tradeNo: string;
  user: User | null;
  activityId: string;
  sceneId: string;
  rewardType: string;
  /** In the reward type's smallest unit; a safe integer. */
  amount: number;
  description?: string;
  extension?: Record<string, string>;
}

function checkRound(round: number): void {
  if (!Number.isSafeInteger(round) || round < 0) {
    throw new RangeError(`round ${round} is not a non-negative integer`);
  }
}

/** The trade number of a scene reward: `activity:scene:round:user`. */
export function tradeNo(activityId: string, sceneId: string, round: number, userId: string): string {
  checkRound(round);
  return `${activityId}:${sceneId}:${round}:${userId}`;
}

function scene(
  activityId: string,
  sceneId: string,
  rewardType: string,
  user: User,
  round: number,
  amount: number,
): Reward {
  return {
    tradeNo: tradeNo(activityId, sceneId, round, user.userId),
    user: { ...user },
    activityId,
    sceneId,
    rewardType,
    amount,
    description: "",
    extension: {},
  };
}

/** Red-envelope rain: one reward per user per numbered round. */
export class RedEnvelopeRain {
  static readonly SCENE = "rain";
  constructor(
    readonly activityId: string,
    readonly rewardType: string,
  ) {}

  /** The reward of a user who caught an envelope in `round`. */
  grab(user: User, round: number, amount: number): Reward {
    const r = scene(this.activityId, RedEnvelopeRain.SCENE, this.rewardType, user, round, amount);
    r.description = "red envelope";
    return r;
  }
}

/** Card collection: each draw gives one card; the draw number is the round. */
export class CardCollection {
  static readonly SCENE = "cards";
  constructor(
    readonly activityId: string,
    readonly rewardType: string,
  ) {}

  /** The card a user drew with their `draw`-th draw. */
  draw(user: User, draw: number, cardId: string): Reward {
    const r = scene(this.activityId, CardCollection.SCENE, this.rewardType, user, draw, 1);
    r.description = `card ${cardId}`;
    r.extension = { card: cardId };
    return r;
  }
}

/** Fireworks: a user wins at most once per slot of the show; the slot is the round. */
export class Fireworks {
  static readonly SCENE = "fireworks";
  constructor(
    readonly activityId: string,
    readonly rewardType: string,
    readonly showStartMs: number,
    readonly slotMs: number,
  ) {}

  /** The slot a moment (Unix ms) falls in; 0 before the show starts. */
  slotAt(nowMs: number): number {
    return Math.floor(Math.max(nowMs - this.showStartMs, 0) / Math.max(this.slotMs, 1));
  }

  /** The reward of a user who won at `nowMs` (Unix ms). */
  win(user: User, nowMs: number, amount: number): Reward {
    const r = scene(this.activityId, Fireworks.SCENE, this.rewardType, user, this.slotAt(nowMs), amount);
    r.description = "fireworks";
    return r;
  }
}
