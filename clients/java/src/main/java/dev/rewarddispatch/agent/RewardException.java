package dev.rewarddispatch.agent;

import java.util.Map;

/**
 * A reward the agent did not answer as durable. Classify it by class (or {@link #code()}), never by
 * message:
 *
 * <table>
 *   <caption>Refusals</caption>
 *   <tr><th>class</th><th>codes</th><th>resend?</th></tr>
 *   <tr><td>{@link InvalidReward}</td><td>INVALID_REWARD, UNKNOWN_REWARD_TYPE ({@link #field()}
 *       set); INVALID_ARGUMENT for a whole batch</td><td>no</td></tr>
 *   <tr><td>{@link Refused}</td><td>BACKPRESSURE, CLOSING (nothing kept)</td><td>yes, later</td></tr>
 *   <tr><td>{@link Refused}</td><td>TOO_MANY_TOKENS, SEAL_FAILED, UNAUTHENTICATED</td><td>no</td></tr>
 *   <tr><td>{@link InDoubt}</td><td>STORE_FAILED, SENT_IN_DOUBT, every failed call, any code this
 *       client does not know</td><td>yes, with the SAME trade number</td></tr>
 * </table>
 */
public abstract sealed class RewardException extends Exception
    permits RewardException.InvalidReward, RewardException.Refused, RewardException.InDoubt {
  private static final long serialVersionUID = 1L;

  private final String code;
  private final String field;
  private final String tradeNo;

  RewardException(String code, String message, String field, String tradeNo) {
    super(code + ": " + message + (field.isEmpty() ? "" : " (field " + field + ")"));
    this.code = code;
    this.field = field;
    this.tradeNo = tradeNo;
  }

  /**
   * @return the agent's code (INVALID_REWARD, ...), a gRPC status name for a failed call
   *     (DEADLINE_EXCEEDED, ...), or CODE_n for a code this client does not know
   */
  public String code() {
    return code;
  }

  /**
   * @return the offending field of an invalid reward (user.user_id, amount, ...), else empty
   */
  public String field() {
    return field;
  }

  /**
   * @return the reward's trade number
   */
  public String tradeNo() {
    return tradeNo;
  }

  /**
   * @return whether sending the same reward again, with the same trade number, may succeed
   */
  public abstract boolean resend();

  /**
   * A field breaks the limits ({@link #field()} names it) or the reward type is unknown. Nothing
   * was kept; a corrected reward may reuse the trade number.
   */
  public static final class InvalidReward extends RewardException {
    private static final long serialVersionUID = 1L;

    InvalidReward(String code, String message, String field, String tradeNo) {
      super(code, message, field, tradeNo);
    }

    @Override
    public boolean resend() {
      return false;
    }
  }

  /**
   * Refused before anything was kept: BACKPRESSURE and CLOSING may be resent later,
   * TOO_MANY_TOKENS, SEAL_FAILED and UNAUTHENTICATED may not.
   */
  public static final class Refused extends RewardException {
    private static final long serialVersionUID = 1L;

    Refused(String code, String message, String field, String tradeNo) {
      super(code, message, field, tradeNo);
    }

    @Override
    public boolean resend() {
      return code().equals("BACKPRESSURE") || code().equals("CLOSING");
    }
  }

  /**
   * The reward may be durable (and then it is credited). Send it again with the SAME trade number
   * for a definite answer; that never makes a second reward.
   */
  public static final class InDoubt extends RewardException {
    private static final long serialVersionUID = 1L;

    InDoubt(String code, String message, String field, String tradeNo) {
      super(code, message, field, tradeNo);
    }

    @Override
    public boolean resend() {
      return true;
    }
  }

  private enum Kind {
    INVALID,
    REFUSED,
    IN_DOUBT
  }

  private static final Map<String, Kind> KINDS =
      Map.of(
          "INVALID_REWARD", Kind.INVALID,
          "UNKNOWN_REWARD_TYPE", Kind.INVALID,
          "BACKPRESSURE", Kind.REFUSED,
          "CLOSING", Kind.REFUSED,
          "TOO_MANY_TOKENS", Kind.REFUSED,
          "SEAL_FAILED", Kind.REFUSED,
          "STORE_FAILED", Kind.IN_DOUBT,
          "SENT_IN_DOUBT", Kind.IN_DOUBT);

  /**
   * The exception for an AgentError code name; an unknown code (a newer agent) is in doubt, the one
   * answer that is always safe.
   */
  static RewardException refusal(String code, String message, String field, String tradeNo) {
    return switch (KINDS.getOrDefault(code, Kind.IN_DOUBT)) {
      case INVALID -> new InvalidReward(code, message, field, tradeNo);
      case REFUSED -> new Refused(code, message, field, tradeNo);
      case IN_DOUBT -> new InDoubt(code, message, field, tradeNo);
    };
  }
}
