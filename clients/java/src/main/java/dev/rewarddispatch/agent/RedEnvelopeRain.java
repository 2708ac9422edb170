package dev.rewarddispatch.agent;

/**
 * Red-envelope rain: one reward per user per numbered round.
 *
 * @param activityId the activity
 * @param rewardType the reward type
 */
public record RedEnvelopeRain(String activityId, String rewardType) {
  /** The scene id. */
  public static final String SCENE = "rain";

  /**
   * The reward of a user who caught an envelope in {@code round}.
   *
   * @param user the user
   * @param round the round (non-negative)
   * @param amount the amount
   * @return the reward
   */
  public Reward grab(User user, long round, long amount) {
    return Reward.scene(activityId, SCENE, rewardType, user, round, amount)
        .description("red envelope")
        .build();
  }
}
