package dev.rewarddispatch.agent;

import io.grpc.CallCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import reward.v1.Agent.AgentHealthRequest;
import reward.v1.Agent.SendRewardReply;
import reward.v1.Agent.SendRewardRequest;
import reward.v1.Agent.SendRewardsReply;
import reward.v1.Agent.SendRewardsRequest;
import reward.v1.Event.UserInfo;
import reward.v1.RewardAgentGrpc;

/**
 * A connection to the host's reward agent ({@code reward-agent}, docs/agent.md). Thread-safe; keep
 * one per process and close it at the end.
 *
 * <pre>{@code
 * try (var agent = RewardAgentClient.unix(Path.of("/run/reward-agent/agent.sock"))) {
 *   var rain = new RedEnvelopeRain("cny2027", "cash");
 *   Issued issued = agent.sendSettled(rain.grab(User.of("u42"), 3, 888), Duration.ofSeconds(1));
 *   System.out.println(issued.token()); // give it to the user
 * }
 * }</pre>
 *
 * <p>A reward answered is durable and credited exactly once. A refusal is a {@link
 * RewardException}; an in-doubt reward is resent with the same trade number ({@link #sendSettled}
 * does it), which never makes a second reward.
 */
public final class RewardAgentClient implements AutoCloseable {
  /**
   * A call's default deadline: the 50 ms a send_reward may take. A slower agent answers in doubt
   * (the call may still succeed there): resend with the same trade number, or give a longer
   * timeout.
   */
  public static final Duration DEFAULT_TIMEOUT = Duration.ofMillis(50);

  /** The most rewards one {@link #sendBatch} takes; more are refused whole (INVALID_ARGUMENT). */
  public static final int MAX_BATCH = 1000;

  private final ManagedChannel channel;
  private final RewardAgentGrpc.RewardAgentBlockingStub stub;
  private final Duration timeout;

  private RewardAgentClient(ManagedChannel channel, CallCredentials credentials, Duration timeout) {
    this.channel = channel;
    var s = RewardAgentGrpc.newBlockingStub(channel);
    this.stub = credentials == null ? s : s.withCallCredentials(credentials);
    this.timeout = timeout;
  }

  /**
   * The agent on its Unix socket (the default; the socket's file mode is the credential).
   *
   * @param socket the agent's socket
   * @return the client
   */
  public static RewardAgentClient unix(Path socket) {
    return unix(socket, DEFAULT_TIMEOUT);
  }

  /**
   * The agent on its Unix socket, with another call deadline.
   *
   * @param socket the agent's socket
   * @param timeout a call's deadline (a batch's is at least 1 s)
   * @return the client
   */
  public static RewardAgentClient unix(Path socket, Duration timeout) {
    var channel =
        Grpc.newChannelBuilder(
                "unix://" + socket.toAbsolutePath(), InsecureChannelCredentials.create())
            // Any plain host name as the HTTP/2 authority: the agent refuses a path there.
            .overrideAuthority("localhost")
            .maxInboundMessageSize(16 << 20)
            .build();
    return new RewardAgentClient(channel, null, timeout);
  }

  /**
   * The agent on loopback TCP, every call carrying its credential (REWARD_AGENT_TOKEN).
   *
   * @param hostPort host:port of the agent's TCP listener
   * @param token the agent's credential
   * @param timeout a call's deadline
   * @return the client
   */
  public static RewardAgentClient tcp(String hostPort, String token, Duration timeout) {
    // A credential read from a file often ends with a newline.
    token = token == null ? "" : token.strip();
    if (token.isEmpty()) {
      throw new IllegalArgumentException("the agent's TCP listener needs its credential");
    }
    var channel =
        Grpc.newChannelBuilder(hostPort, InsecureChannelCredentials.create())
            .maxInboundMessageSize(16 << 20)
            .build();
    return new RewardAgentClient(channel, new Bearer(token), timeout);
  }

  /** The TCP listener's credential as authorization metadata (loopback only, no TLS). */
  private static final class Bearer extends CallCredentials {
    private static final Metadata.Key<String> AUTHORIZATION =
        Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
    private final String token;

    Bearer(String token) {
      this.token = token;
    }

    @Override
    public void applyRequestMetadata(RequestInfo info, Executor executor, MetadataApplier applier) {
      var m = new Metadata();
      m.put(AUTHORIZATION, "Bearer " + token);
      applier.apply(m);
    }
  }

  /**
   * Sends one reward.
   *
   * @param reward the reward
   * @return the reward, durable
   * @throws RewardException when it was not answered as durable
   */
  public Issued send(Reward reward) throws RewardException {
    SendRewardReply reply;
    try {
      reply =
          stub.withDeadlineAfter(timeout.toNanos(), TimeUnit.NANOSECONDS)
              .sendReward(request(reward));
    } catch (StatusRuntimeException e) {
      throw transport(e.getStatus(), reward.tradeNo());
    }
    Answer a = answer(reply, reward.tradeNo());
    if (a.error() != null) {
      throw a.error();
    }
    return a.issued();
  }

  /**
   * One reward's answer in a batch: {@code issued}, or {@code error} when refused.
   *
   * @param issued the durable reward, or null
   * @param error the refusal, or null
   */
  public record Answer(Issued issued, RewardException error) {}

  /**
   * Sends up to {@link #MAX_BATCH} rewards in one call: one answer per reward, in order. A call
   * that fails as a call answers every reward in doubt (or invalid, when the agent refused the
   * whole message).
   *
   * @param rewards the rewards
   * @return one answer per reward, in order
   */
  public List<Answer> sendBatch(List<Reward> rewards) {
    var req = SendRewardsRequest.newBuilder();
    for (Reward r : rewards) {
      req.addRewards(request(r));
    }
    long nanos = Math.max(timeout.toNanos(), Duration.ofSeconds(1).toNanos());
    var out = new ArrayList<Answer>(rewards.size());
    SendRewardsReply reply;
    try {
      reply = stub.withDeadlineAfter(nanos, TimeUnit.NANOSECONDS).sendRewards(req.build());
    } catch (StatusRuntimeException e) {
      for (Reward r : rewards) {
        out.add(new Answer(null, transport(e.getStatus(), r.tradeNo())));
      }
      return out;
    }
    for (int i = 0; i < rewards.size(); i++) {
      String tradeNo = rewards.get(i).tradeNo();
      out.add(
          reply.getRepliesCount() == rewards.size()
              ? answer(reply.getReplies(i), tradeNo)
              : new Answer(
                  null,
                  new RewardException.InDoubt(
                      "SHORT_REPLY",
                      reply.getRepliesCount() + " answers for " + rewards.size() + " rewards",
                      "",
                      tradeNo)));
    }
    return out;
  }

  /**
   * Sends {@code reward} and resends it, with the same trade number, while its answer may be resent
   * (in doubt, back-pressure, a closing agent), for up to {@code within}; the pause between tries
   * starts at 50 ms and doubles up to 1 s, so an overloaded agent is not sent more. If none settled
   * it, throws the last refusal, except that once any try was in doubt the answer stays {@link
   * RewardException.InDoubt}: a later refusal says nothing of the earlier try, which may still be
   * credited. An interrupt ends the tries the same way (the thread's interrupt flag set again).
   *
   * @param reward the reward
   * @param within how long to keep trying
   * @return the reward, durable
   * @throws RewardException the last refusal (in doubt once any try was), if none settled it
   */
  public Issued sendSettled(Reward reward, Duration within) throws RewardException {
    return settle(() -> send(reward), within);
  }

  /** One try of a settled send. */
  @FunctionalInterface
  interface Try {
    Issued send() throws RewardException;
  }

  static Issued settle(Try once, Duration within) throws RewardException {
    Instant until = Instant.now().plus(within);
    long pauseMs = 50;
    RewardException.InDoubt doubt = null;
    while (true) {
      RewardException last;
      try {
        return once.send();
      } catch (RewardException e) {
        last = e;
        if (e instanceof RewardException.InDoubt d) {
          doubt = d;
        }
      }
      boolean stop = !last.resend() || Instant.now().plusMillis(pauseMs).isAfter(until);
      if (!stop) {
        try {
          Thread.sleep(pauseMs);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          stop = true;
        }
      }
      if (stop) {
        throw doubt != null && !(last instanceof RewardException.InDoubt) ? doubt : last;
      }
      pauseMs = Math.min(pauseMs * 2, 1000);
    }
  }

  /**
   * @return whether the agent takes rewards now
   */
  public boolean serving() {
    try {
      return stub.withDeadlineAfter(1, TimeUnit.SECONDS)
          .health(AgentHealthRequest.getDefaultInstance())
          .getServing();
    } catch (StatusRuntimeException e) {
      return false;
    }
  }

  /** Closes the connection; calls in flight end in doubt. */
  @Override
  public void close() {
    channel.shutdownNow();
    try {
      channel.awaitTermination(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  static SendRewardRequest request(Reward r) {
    var b =
        SendRewardRequest.newBuilder()
            .setTradeNo(r.tradeNo())
            .setActivityId(r.activityId())
            .setSceneId(r.sceneId())
            .setRewardType(r.rewardType())
            .setAmount(r.amount())
            .setDescription(r.description())
            .putAllExtension(r.extension());
    if (r.user() != null) {
      b.setUser(
          UserInfo.newBuilder()
              .setUserId(r.user().userId())
              .setDeviceId(r.user().deviceId())
              .setAppId(r.user().appId()));
    }
    return b.build();
  }

  private static final Map<reward.v1.Agent.HeldBy, Issued.HeldBy> HELD_BY =
      Map.of(
          reward.v1.Agent.HeldBy.HELD_BY_STORE, Issued.HeldBy.STORE,
          reward.v1.Agent.HeldBy.HELD_BY_QUEUE, Issued.HeldBy.QUEUE,
          reward.v1.Agent.HeldBy.HELD_BY_SPOOL, Issued.HeldBy.SPOOL);

  static Answer answer(SendRewardReply reply, String tradeNo) {
    switch (reply.getResultCase()) {
      case ISSUED -> {
        var i = reply.getIssued();
        return new Answer(
            new Issued(
                i.getToken(),
                i.getTradeNo(),
                i.getQueue(),
                HELD_BY.getOrDefault(i.getHeldBy(), Issued.HeldBy.UNSPECIFIED)),
            null);
      }
      case ERROR -> {
        var e = reply.getError();
        // A code number this client does not know (a newer agent) is in doubt.
        String code =
            e.getCode() == reward.v1.Agent.AgentErrorCode.UNRECOGNIZED
                ? "CODE_" + e.getCodeValue()
                : e.getCode().name();
        return new Answer(
            null, RewardException.refusal(code, e.getMessage(), e.getField(), tradeNo));
      }
      default -> {
        return new Answer(
            null,
            new RewardException.InDoubt(
                "EMPTY_REPLY",
                "the agent's reply held neither a reward nor an error",
                "",
                tradeNo));
      }
    }
  }

  static RewardException transport(Status status, String tradeNo) {
    String name = status.getCode().name();
    String detail = status.getDescription() == null ? name : status.getDescription();
    return switch (status.getCode()) {
      // TCP without the right credential: nothing was done.
      case UNAUTHENTICATED -> new RewardException.Refused(name, detail, "", tradeNo);
      // The message itself was refused (a batch over the limit, over 16 MiB).
      case INVALID_ARGUMENT, OUT_OF_RANGE ->
          new RewardException.InvalidReward(name, detail, "", tradeNo);
      // Every other failure of the call may come after the agent did its work.
      default -> new RewardException.InDoubt(name, detail, "", tradeNo);
    };
  }
}
