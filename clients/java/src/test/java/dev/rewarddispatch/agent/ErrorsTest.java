package dev.rewarddispatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.util.Arrays;
import java.util.Map;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;
import reward.v1.Agent.AgentError;
import reward.v1.Agent.AgentErrorCode;
import reward.v1.Agent.SendRewardReply;

/** Refusal codes map to the documented classes and resend advice. */
class ErrorsTest {
  private record Want(Class<? extends RewardException> cls, boolean resend) {}

  @Test
  void everyCodeOfTheContractHasItsClass() {
    Map<String, Want> want =
        Map.of(
            "INVALID_REWARD", new Want(RewardException.InvalidReward.class, false),
            "UNKNOWN_REWARD_TYPE", new Want(RewardException.InvalidReward.class, false),
            "BACKPRESSURE", new Want(RewardException.Refused.class, true),
            "CLOSING", new Want(RewardException.Refused.class, true),
            "TOO_MANY_TOKENS", new Want(RewardException.Refused.class, false),
            "SEAL_FAILED", new Want(RewardException.Refused.class, false),
            "STORE_FAILED", new Want(RewardException.InDoubt.class, true),
            "SENT_IN_DOUBT", new Want(RewardException.InDoubt.class, true));
    var codes = new TreeSet<String>();
    Arrays.stream(AgentErrorCode.values())
        .filter(c -> c != AgentErrorCode.UNRECOGNIZED && c.getNumber() != 0)
        .forEach(c -> codes.add(c.name()));
    assertEquals(new TreeSet<>(want.keySet()), codes, "a code of the .proto has no class here");
    for (var e : want.entrySet()) {
      var reply =
          SendRewardReply.newBuilder()
              .setError(
                  AgentError.newBuilder()
                      .setCode(AgentErrorCode.valueOf(e.getKey()))
                      .setMessage("m"))
              .build();
      RewardException got = RewardAgentClient.answer(reply, "t1").error();
      assertEquals(e.getValue().cls(), got.getClass(), e.getKey());
      assertEquals(e.getValue().resend(), got.resend(), e.getKey());
      assertEquals("t1", got.tradeNo());
      assertEquals(e.getKey(), got.code());
    }
  }

  @Test
  void aCodeNumberThisClientDoesNotKnowIsInDoubt() {
    var reply =
        SendRewardReply.newBuilder()
            .setError(AgentError.newBuilder().setCodeValue(99).setMessage("new"))
            .build();
    RewardException e = RewardAgentClient.answer(reply, "t1").error();
    assertInstanceOf(RewardException.InDoubt.class, e);
    assertEquals("CODE_99", e.code());
    assertTrue(e.resend());
  }

  @Test
  void anEmptyReplyIsInDoubt() {
    assertInstanceOf(
        RewardException.InDoubt.class,
        RewardAgentClient.answer(SendRewardReply.getDefaultInstance(), "t1").error());
  }

  @Test
  void aFailedCallIsInDoubtUnlessTheAgentRefusedTheMessage() {
    Map<Status.Code, Class<? extends RewardException>> want =
        Map.of(
            Status.Code.DEADLINE_EXCEEDED, RewardException.InDoubt.class,
            Status.Code.UNAVAILABLE, RewardException.InDoubt.class,
            Status.Code.INTERNAL, RewardException.InDoubt.class,
            Status.Code.CANCELLED, RewardException.InDoubt.class,
            Status.Code.UNAUTHENTICATED, RewardException.Refused.class,
            Status.Code.INVALID_ARGUMENT, RewardException.InvalidReward.class,
            Status.Code.OUT_OF_RANGE, RewardException.InvalidReward.class);
    for (var e : want.entrySet()) {
      RewardException got =
          RewardAgentClient.transport(Status.fromCode(e.getKey()).withDescription("x"), "t1");
      assertEquals(e.getValue(), got.getClass(), e.getKey().name());
      assertEquals(e.getKey().name(), got.code());
    }
  }
}
