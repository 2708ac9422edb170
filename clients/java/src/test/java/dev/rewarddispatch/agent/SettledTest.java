package dev.rewarddispatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The settled send keeps an in-doubt answer in doubt. */
class SettledTest {
  private static RewardAgentClient.Try scripted(List<String> codes, AtomicInteger calls) {
    return () -> {
      String code = codes.get(Math.min(calls.getAndIncrement(), codes.size() - 1));
      throw RewardException.refusal(code, "m", "", "t1");
    };
  }

  @ParameterizedTest
  @ValueSource(strings = {"TOO_MANY_TOKENS", "BACKPRESSURE"})
  void aSettledSendStaysInDoubtOnceATryWasInDoubt(String later) {
    var calls = new AtomicInteger();
    assertThrows(
        RewardException.InDoubt.class,
        () ->
            RewardAgentClient.settle(
                scripted(List.of("SENT_IN_DOUBT", later), calls), Duration.ofSeconds(2)));
    assertTrue(calls.get() >= 2);
  }

  @Test
  void aSettledSendRefusedForGoodWithoutDoubtIsRefused() {
    var calls = new AtomicInteger();
    assertThrows(
        RewardException.Refused.class,
        () ->
            RewardAgentClient.settle(
                scripted(List.of("TOO_MANY_TOKENS"), calls), Duration.ofSeconds(1)));
    assertEquals(1, calls.get());
  }

  @Test
  void anInterruptEndsTheTriesInDoubt() {
    var calls = new AtomicInteger();
    Thread.currentThread().interrupt();
    try {
      assertThrows(
          RewardException.InDoubt.class,
          () ->
              RewardAgentClient.settle(
                  scripted(List.of("SENT_IN_DOUBT"), calls), Duration.ofSeconds(5)));
      assertTrue(Thread.currentThread().isInterrupted());
    } finally {
      Thread.interrupted();
    }
  }
}
