package dev.rewarddispatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Sends rewards through an agent as fast as BENCH_CONCURRENCY threads can, one reward a call, and
 * writes the rate and the call latencies to CONFORMANCE_OUT/java.bench.json; every answered reward
 * is also appended to CONFORMANCE_OUT/java.bench.sent.tsv for the books. Run by
 * agent/tests/clients.rs with REWARD_CLIENTS_BENCH set ({@code mvn test -Dgroups=bench}).
 */
@Tag("bench")
class AgentBench {
  private static String need(String name) {
    String v = System.getenv(name);
    if (v == null || v.isEmpty()) {
      fail(name + " is not set: run the bench through agent/tests/clients.rs");
    }
    return v;
  }

  @Test
  void sendThroughTheAgent() throws Exception {
    String tag = need("CONFORMANCE_TAG") + "-java";
    Path out = Path.of(need("CONFORMANCE_OUT"));
    int n = Integer.parseInt(System.getenv().getOrDefault("BENCH_REWARDS", "10000"));
    int workers = Integer.parseInt(System.getenv().getOrDefault("BENCH_CONCURRENCY", "16"));
    var rain = new RedEnvelopeRain(tag, "cash");
    long[] lat = new long[n];
    Issued[] issued = new Issued[n];
    var next = new AtomicInteger();
    var failed = new AtomicInteger();
    long start;
    long end;
    try (var agent =
        RewardAgentClient.unix(Path.of(need("REWARD_AGENT_SOCKET")), Duration.ofSeconds(30))) {
      ExecutorService pool = Executors.newFixedThreadPool(workers);
      start = System.nanoTime();
      for (int w = 0; w < workers; w++) {
        pool.submit(
            () -> {
              for (int i = next.getAndIncrement(); i < n; i = next.getAndIncrement()) {
                long t = System.nanoTime();
                try {
                  issued[i] =
                      agent.sendSettled(rain.grab(User.of("b" + i), 1, 5), Duration.ofSeconds(30));
                } catch (RewardException e) {
                  failed.incrementAndGet();
                }
                lat[i] = System.nanoTime() - t;
              }
            });
      }
      pool.shutdown();
      if (!pool.awaitTermination(10, TimeUnit.MINUTES)) {
        fail("the bench did not finish within 10 min");
      }
      end = System.nanoTime();
    }
    assertEquals(0, failed.get(), "rewards not issued");
    long now = System.currentTimeMillis();
    var sent = new StringBuilder();
    for (int i = 0; i < n; i++) {
      sent.append(
          String.join(
                  "\t",
                  issued[i].tradeNo(),
                  "b" + i,
                  tag,
                  "rain",
                  "cash",
                  "5",
                  Long.toString(now),
                  issued[i].heldBy() == Issued.HeldBy.STORE ? "1" : "0",
                  "0",
                  issued[i].token())
              + "\n");
    }
    Files.writeString(
        out.resolve("java.bench.sent.tsv"),
        sent,
        StandardCharsets.UTF_8,
        StandardOpenOption.CREATE,
        StandardOpenOption.APPEND);
    Arrays.sort(lat);
    double secs = (end - start) / 1e9;
    String report =
        String.format(
            Locale.ROOT,
            "{\"lang\":\"java\",\"rewards\":%d,\"concurrency\":%d,\"secs\":%.3f,\"rate\":%.1f,"
                + "\"p50_ms\":%.3f,\"p99_ms\":%.3f}",
            n,
            workers,
            secs,
            n / secs,
            lat[(int) (0.50 * (n - 1))] / 1e6,
            lat[(int) (0.99 * (n - 1))] / 1e6);
    Files.writeString(out.resolve("java.bench.json"), report);
    System.out.println(report);
  }
}
