package dev.rewarddispatch.agent;

/**
 * Card collection: each draw gives one card; the draw number is the round.
 *
 * @param activityId the activity
 * @param rewardType the reward type
 */
public record CardCollection(String activityId, String rewardType) {
  /** The scene id. */
  public static final String SCENE = "cards";

  /**
   * The card a user drew with their {@code draw}-th draw.
   *
   * @param user the user
   * @param draw the draw number (non-negative)
   * @param cardId the card
   * @return the reward
   */
  public Reward draw(User user, long draw, String cardId) {
    return Reward.scene(activityId, SCENE, rewardType, user, draw, 1)
        .description("card " + cardId)
        .extension("card", cardId)
        .build();
  }
}
