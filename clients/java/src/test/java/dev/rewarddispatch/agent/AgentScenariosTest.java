package dev.rewarddispatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * The shared scenarios (clients/conformance/scenarios.json) against a real agent. Run by the stack
 * tier's harness (agent/tests/clients.rs, through ops/test) with {@code mvn test -Dgroups=agent
 * -Dexcluded.groups=}, which starts the agent and sets the variables of
 * clients/conformance/README.md; without them every test here fails, never skips.
 */
@Tag("agent")
@TestMethodOrder(MethodOrderer.MethodName.class)
class AgentScenariosTest {
  private static final String LANG = "java";
  private static JsonObject sc;

  @BeforeAll
  static void load() throws IOException {
    sc = Scenarios.load();
  }

  private static String need(String name) {
    String v = System.getenv(name);
    if (v == null || v.isEmpty()) {
      fail(name + " is not set: run the client tests through ops/test (agent/tests/clients.rs)");
    }
    return v;
  }

  private static Duration callTimeout() {
    String s = System.getenv("CONFORMANCE_TIMEOUT_S");
    return Duration.ofMillis((long) (1000 * (s == null ? 5.0 : Double.parseDouble(s))));
  }

  private static String tag() {
    return need("CONFORMANCE_TAG") + "-" + LANG;
  }

  private static RewardAgentClient agent() {
    return RewardAgentClient.unix(Path.of(need("REWARD_AGENT_SOCKET")), callTimeout());
  }

  /** The books' sent line (tools/src/books/sent.rs) and the token, for the harness. */
  private static synchronized void record(Reward r, Issued i) {
    Path out = Path.of(need("CONFORMANCE_OUT"));
    String line =
        String.join(
                "\t",
                r.tradeNo(),
                r.user().userId(),
                r.activityId(),
                r.sceneId(),
                r.rewardType(),
                Long.toString(r.amount()),
                Long.toString(System.currentTimeMillis()),
                i.heldBy() == Issued.HeldBy.STORE ? "1" : "0",
                "0",
                i.token())
            + "\n";
    try {
      Files.createDirectories(out);
      Files.writeString(
          out.resolve(LANG + ".sent.tsv"),
          line,
          StandardCharsets.UTF_8,
          StandardOpenOption.CREATE,
          StandardOpenOption.APPEND);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static JsonElement expand(JsonElement v) {
    if (v.isJsonObject()) {
      JsonObject o = v.getAsJsonObject();
      if (o.size() == 2 && o.has("repeat") && o.has("count")) {
        return new com.google.gson.JsonPrimitive(
            o.get("repeat").getAsString().repeat(o.get("count").getAsInt()));
      }
      JsonObject out = new JsonObject();
      o.entrySet().forEach(e -> out.add(e.getKey(), expand(e.getValue())));
      return out;
    }
    return v;
  }

  private static String str(JsonObject o, String key) {
    JsonElement e = o.get(key);
    return e == null || e.isJsonNull() ? "" : e.getAsString();
  }

  /** The scenarios' base reward for {@code user}, with {@code set} laid over it. */
  private static Reward reward(String tag, String user, JsonObject set) {
    JsonObject doc = sc.getAsJsonObject("base").deepCopy();
    if (set != null) {
      set.entrySet().forEach(e -> doc.add(e.getKey(), expand(e.getValue())));
    }
    var fill =
        (java.util.function.Function<String, String>)
            s -> s.replace("{tag}", tag).replace("{user}", user);
    var b =
        Reward.builder()
            .tradeNo(fill.apply(str(doc, "trade_no")))
            .activityId(fill.apply(str(doc, "activity_id")))
            .sceneId(str(doc, "scene_id"))
            .rewardType(str(doc, "reward_type"))
            .amount(doc.get("amount").getAsLong())
            .description(str(doc, "description"));
    JsonElement u = doc.get("user");
    if (u != null && u.isJsonObject()) {
      JsonObject uo = u.getAsJsonObject();
      b.user(new User(fill.apply(str(uo, "user_id")), str(uo, "device_id"), str(uo, "app_id")));
    }
    doc.getAsJsonObject("extension")
        .entrySet()
        .forEach(e -> b.extension(e.getKey(), e.getValue().getAsString()));
    return b.build();
  }

  @Test
  void aOneRewardIsIssuedWithAToken() throws Exception {
    try (var c = agent()) {
      Reward r = reward(tag(), "u-one", null);
      Issued i = c.send(r);
      assertEquals(r.tradeNo(), i.tradeNo());
      assertFalse(i.token().isEmpty());
      assertNotEquals(Issued.HeldBy.UNSPECIFIED, i.heldBy());
      record(r, i);
    }
  }

  @Test
  void bABatchAnswersEachRewardInOrder() {
    try (var c = agent()) {
      var rewards = new ArrayList<Reward>();
      for (int i = 0; i < sc.getAsJsonObject("batch").get("size").getAsInt(); i++) {
        rewards.add(reward(tag(), "u-batch-" + i, null));
      }
      var answers = c.sendBatch(rewards);
      assertEquals(rewards.size(), answers.size());
      for (int i = 0; i < answers.size(); i++) {
        assertNull(answers.get(i).error(), rewards.get(i).tradeNo());
        assertEquals(rewards.get(i).tradeNo(), answers.get(i).issued().tradeNo());
        record(rewards.get(i), answers.get(i).issued());
      }
    }
  }

  @Test
  void cARepeatedTradeNumberIsAnsweredAgainAndCreditedOnce() throws Exception {
    try (var c = agent()) {
      Reward r = reward(tag(), "u-repeat", null);
      Issued first = c.send(r);
      Issued again = c.send(r);
      assertEquals(r.tradeNo(), first.tradeNo());
      assertEquals(r.tradeNo(), again.tradeNo());
      record(r, first);
    }
  }

  @Test
  void dEveryBadInputIsRefusedWithItsCodeAndField() {
    try (var c = agent()) {
      var bad = sc.getAsJsonArray("bad_inputs");
      assertFalse(bad.isEmpty());
      for (JsonElement e : bad) {
        JsonObject b = e.getAsJsonObject();
        String name = b.get("name").getAsString();
        try {
          c.send(reward(tag(), "u-bad", b.getAsJsonObject("set")));
          fail(name + ": issued, not refused");
        } catch (RewardException x) {
          assertEquals(b.get("code").getAsString(), x.code(), name + ": " + x.getMessage());
          assertEquals(b.get("field").getAsString(), x.field(), name + ": " + x.getMessage());
          assertFalse(x.resend(), name);
        }
      }
    }
  }

  @Test
  void eABatchOverTheLimitIsRefusedWhole() {
    try (var c = agent()) {
      var rewards = new ArrayList<Reward>();
      for (int i = 0; i < sc.getAsJsonObject("over_batch").get("size").getAsInt(); i++) {
        rewards.add(reward(tag(), "u-over-" + i, null));
      }
      for (var a : c.sendBatch(rewards)) {
        assertTrue(
            a.error() != null && a.error().code().equals("INVALID_ARGUMENT") && !a.error().resend(),
            String.valueOf(a));
      }
    }
  }

  /** An agent of the test's own, on a private socket and spool. */
  private record OwnAgent(Process proc, Path socket, Path log) {
    static OwnAgent start(Path dir) throws Exception {
      Path socket = dir.resolve("kill.sock");
      Path log = dir.resolve("agent.log");
      var pb =
          new ProcessBuilder(need("REWARD_AGENT_BIN"), "--config", need("REWARD_AGENT_CONFIG"))
              .redirectErrorStream(true)
              .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()));
      pb.environment().put("REWARD_AGENT__LISTEN__SOCKET", socket.toString());
      pb.environment().put("REWARD_AGENT__ADMIN__ADDR", "127.0.0.1:0");
      pb.environment().put("REWARD_SDK__SPOOL__DIR", dir.resolve("spool").toString());
      Process p = pb.start();
      long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while (System.nanoTime() < until) {
        if (!p.isAlive()) {
          fail("the agent exited with " + p.exitValue() + "; log " + log);
        }
        if (Files.exists(socket)) {
          try (var c = RewardAgentClient.unix(socket, Duration.ofSeconds(1))) {
            if (c.serving()) {
              return new OwnAgent(p, socket, log);
            }
          }
        }
        Thread.sleep(50);
      }
      p.destroyForcibly();
      fail("the agent did not serve within 60 s; log " + log);
      return null;
    }

    /** Sends SIGKILL or SIGTERM and waits up to a minute for the exit code. */
    int stop(boolean kill) throws InterruptedException {
      if (kill) {
        proc.destroyForcibly();
      } else {
        proc.destroy();
      }
      if (!proc.waitFor(60, TimeUnit.SECONDS)) {
        proc.destroyForcibly();
        fail("the agent did not exit within 60 s; log " + log);
      }
      return proc.exitValue();
    }
  }

  @Test
  void fAnAgentKilledMidBatchLosesNoAnsweredReward() throws Exception {
    // SIGKILL while batches flow, restart, resend every unanswered reward with its trade number:
    // every answered one is recorded for the harness, which checks each is credited once.
    JsonObject k = sc.getAsJsonObject("kill");
    int total = k.get("rewards").getAsInt();
    int size = k.get("batch").getAsInt();
    int cutAt = k.get("kill_after_batches").getAsInt();
    int senders = k.get("senders").getAsInt();
    Path dir = Files.createTempDirectory("ra-java-"); // short: a socket path fits in 108 bytes
    String tag = tag();
    var rewards = new ArrayList<Reward>();
    for (int i = 0; i < total; i++) {
      rewards.add(reward(tag, "u-kill-" + i, null));
    }
    var batches = new ArrayList<List<Reward>>();
    for (int i = 0; i < total; i += size) {
      batches.add(rewards.subList(i, Math.min(i + size, total)));
    }
    Map<String, Issued> answered = new ConcurrentHashMap<>();
    var unanswered = new ConcurrentLinkedQueue<Reward>();
    var forGood = new ConcurrentLinkedQueue<String>();
    java.util.function.BiConsumer<List<Reward>, List<RewardAgentClient.Answer>> settle =
        (batch, answers) -> {
          for (int i = 0; i < answers.size(); i++) {
            var a = answers.get(i);
            if (a.error() == null) {
              answered.put(batch.get(i).tradeNo(), a.issued());
            } else if (a.error().resend()) {
              unanswered.add(batch.get(i));
            } else {
              forGood.add(batch.get(i).tradeNo() + ": " + a.error().getMessage());
            }
          }
        };

    OwnAgent own = OwnAgent.start(dir);
    try (var client = RewardAgentClient.unix(own.socket(), Duration.ofSeconds(30))) {
      // The batches before the kill, one after another, as a service sends them.
      for (var b : batches.subList(0, cutAt)) {
        settle.accept(b, client.sendBatch(b));
      }
      // The rest from several senders at once; the agent is killed once one of them was
      // answered, so the kill lands while the agent is taking batches, and the batches not sent
      // by then find it gone.
      var todo = new ConcurrentLinkedQueue<>(batches.subList(cutAt, batches.size()));
      var firstAnswer = new CountDownLatch(1);
      ExecutorService pool = Executors.newFixedThreadPool(senders);
      for (int s = 0; s < senders; s++) {
        pool.submit(
            () -> {
              for (var b = todo.poll(); b != null; b = todo.poll()) {
                settle.accept(b, client.sendBatch(b));
                firstAnswer.countDown();
              }
            });
      }
      assertTrue(firstAnswer.await(120, TimeUnit.SECONDS), "no batch answered within 120 s");
      assertNotEquals(0, own.stop(true));
      pool.shutdown();
      assertTrue(
          pool.awaitTermination(120, TimeUnit.SECONDS),
          "a batch call did not return within 120 s of the kill");
    }
    assertEquals(List.of(), new ArrayList<>(forGood), "refused for good");
    assertFalse(unanswered.isEmpty(), "the kill cut no call: the scenario proved nothing");

    OwnAgent restarted = OwnAgent.start(dir);
    try {
      try (var c = RewardAgentClient.unix(restarted.socket(), Duration.ofSeconds(10))) {
        for (Reward r : unanswered) {
          answered.put(r.tradeNo(), c.sendSettled(r, Duration.ofSeconds(30)));
        }
      }
      long stopping = System.nanoTime();
      assertEquals(
          0, restarted.stop(false), "the agent did not stop cleanly; log " + restarted.log());
      System.out.printf(
          "%d answered before the kill, %d resent after it; the restarted agent stopped in %d ms%n",
          total - unanswered.size(),
          unanswered.size(),
          TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - stopping));
      assertEquals(total, answered.size());
      Map<String, Issued> inOrder = new LinkedHashMap<>();
      for (Reward r : rewards) {
        inOrder.put(r.tradeNo(), answered.get(r.tradeNo()));
        record(r, answered.get(r.tradeNo()));
      }
      assertEquals(
          Collections.nCopies(total, true), inOrder.values().stream().map(i -> i != null).toList());
    } finally {
      restarted.proc().destroyForcibly(); // a failed test leaves no agent behind
    }
    try (var files = Files.walk(dir)) {
      files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }
}
