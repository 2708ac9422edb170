package dev.rewarddispatch.agent;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * One reward, as the activity service asks for it. {@code tradeNo} is the global idempotency key:
 * the same reward always carries the same one. Build one with {@link #builder()} or a scene helper
 * ({@link RedEnvelopeRain}, {@link CardCollection}, {@link Fireworks}).
 *
 * @param tradeNo the idempotency key
 * @param user who wins it (null is refused by the agent, field {@code user.user_id})
 * @param activityId the activity
 * @param sceneId the scene
 * @param rewardType the reward type (cash, coin, ...)
 * @param amount in the type's smallest unit
 * @param description shown to the user
 * @param extension up to 16 extra fields
 */
public record Reward(
    String tradeNo,
    User user,
    String activityId,
    String sceneId,
    String rewardType,
    long amount,
    String description,
    Map<String, String> extension) {

  /** Null strings become empty; the extension is copied and unmodifiable. */
  public Reward {
    tradeNo = tradeNo == null ? "" : tradeNo;
    activityId = activityId == null ? "" : activityId;
    sceneId = sceneId == null ? "" : sceneId;
    rewardType = rewardType == null ? "" : rewardType;
    description = description == null ? "" : description;
    extension =
        extension == null
            ? Map.of()
            : java.util.Collections.unmodifiableMap(new LinkedHashMap<>(extension));
  }

  /**
   * A builder with every field empty.
   *
   * @return the builder
   */
  public static Builder builder() {
    return new Builder();
  }

  /** Builds a {@link Reward} field by field. */
  public static final class Builder {
    private String tradeNo = "";
    private User user;
    private String activityId = "";
    private String sceneId = "";
    private String rewardType = "";
    private long amount;
    private String description = "";
    private final Map<String, String> extension = new LinkedHashMap<>();

    private Builder() {}

    /**
     * @param v the trade number (the idempotency key)
     * @return this
     */
    public Builder tradeNo(String v) {
      tradeNo = v;
      return this;
    }

    /**
     * @param v who wins it
     * @return this
     */
    public Builder user(User v) {
      user = v;
      return this;
    }

    /**
     * @param v the activity
     * @return this
     */
    public Builder activityId(String v) {
      activityId = v;
      return this;
    }

    /**
     * @param v the scene
     * @return this
     */
    public Builder sceneId(String v) {
      sceneId = v;
      return this;
    }

    /**
     * @param v the reward type
     * @return this
     */
    public Builder rewardType(String v) {
      rewardType = v;
      return this;
    }

    /**
     * @param v the amount, in the type's smallest unit
     * @return this
     */
    public Builder amount(long v) {
      amount = v;
      return this;
    }

    /**
     * @param v shown to the user
     * @return this
     */
    public Builder description(String v) {
      description = v;
      return this;
    }

    /**
     * @param key an extension field
     * @param value its value
     * @return this
     */
    public Builder extension(String key, String value) {
      extension.put(Objects.requireNonNull(key, "key"), Objects.requireNonNull(value, "value"));
      return this;
    }

    /**
     * @return the reward
     */
    public Reward build() {
      return new Reward(
          tradeNo, user, activityId, sceneId, rewardType, amount, description, extension);
    }
  }

  /**
   * The trade number of a scene reward: {@code activity:scene:round:user}.
   *
   * @param activityId the activity
   * @param sceneId the scene
   * @param round the round (non-negative)
   * @param userId the user
   * @return the trade number
   */
  public static String tradeNo(String activityId, String sceneId, long round, String userId) {
    if (round < 0) {
      throw new IllegalArgumentException("round " + round + " is negative");
    }
    return activityId + ":" + sceneId + ":" + round + ":" + userId;
  }

  static Builder scene(
      String activityId, String sceneId, String rewardType, User user, long round, long amount) {
    return builder()
        .tradeNo(tradeNo(activityId, sceneId, round, user.userId()))
        .user(user)
        .activityId(activityId)
        .sceneId(sceneId)
        .rewardType(rewardType)
        .amount(amount);
  }
}
