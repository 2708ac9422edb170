package dev.rewarddispatch.agent;

/**
 * Fireworks: a user wins at most once per slot of the show; the slot is the round.
 *
 * @param activityId the activity
 * @param rewardType the reward type
 * @param showStartMs when the show starts, Unix ms
 * @param slotMs a slot's length, ms
 */
public record Fireworks(String activityId, String rewardType, long showStartMs, long slotMs) {
  /** The scene id. */
  public static final String SCENE = "fireworks";

  /**
   * The slot a moment falls in; 0 before the show starts.
   *
   * @param nowMs the moment, Unix ms
   * @return the slot
   */
  public long slotAt(long nowMs) {
    return Math.max(nowMs - showStartMs, 0) / Math.max(slotMs, 1);
  }

  /**
   * The reward of a user who won at {@code nowMs}.
   *
   * @param user the user
   * @param nowMs the moment, Unix ms
   * @param amount the amount
   * @return the reward
   */
  public Reward win(User user, long nowMs, long amount) {
    return Reward.scene(activityId, SCENE, rewardType, user, slotAt(nowMs), amount)
        .description("fireworks")
        .build();
  }
}
