package dev.rewarddispatch.agent;

import java.util.Objects;

/**
 * Who wins a reward: the user id, and optionally the device and app.
 *
 * @param userId the user
 * @param deviceId the device, or empty
 * @param appId the app, or empty
 */
public record User(String userId, String deviceId, String appId) {
  /** Null device and app ids become empty. */
  public User {
    Objects.requireNonNull(userId, "userId");
    deviceId = deviceId == null ? "" : deviceId;
    appId = appId == null ? "" : appId;
  }

  /**
   * A user known by id only.
   *
   * @param userId the user
   * @return the user
   */
  public static User of(String userId) {
    return new User(userId, "", "");
  }
}
