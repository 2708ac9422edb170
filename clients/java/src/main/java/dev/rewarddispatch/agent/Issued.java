package dev.rewarddispatch.agent;

/**
 * A durable reward: give {@code token} to the user.
 *
 * @param token the sealed reward token
 * @param tradeNo the reward's trade number
 * @param queue the queue its event goes through
 * @param heldBy which store held it when the agent answered
 */
public record Issued(String token, String tradeNo, String queue, HeldBy heldBy) {
  /** Which store held the reward durably when the agent answered. */
  public enum HeldBy {
    /** The token store (Redis). */
    STORE,
    /** A broker acknowledged its event. */
    QUEUE,
    /** The agent's spool on disk. */
    SPOOL,
    /** A value this client does not know. */
    UNSPECIFIED
  }
}
