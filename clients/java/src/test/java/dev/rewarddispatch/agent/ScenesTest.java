package dev.rewarddispatch.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The scene helpers build what the Rust SDK builds (the shared vectors). */
class ScenesTest {
  private static Reward build(JsonObject c) {
    User user = User.of(c.get("user_id").getAsString());
    String activity = c.get("activity_id").getAsString();
    String type = c.get("reward_type").getAsString();
    return switch (c.get("scene").getAsString()) {
      case "rain" ->
          new RedEnvelopeRain(activity, type)
              .grab(user, c.get("round").getAsLong(), c.get("amount").getAsLong());
      case "cards" ->
          new CardCollection(activity, type)
              .draw(user, c.get("draw").getAsLong(), c.get("card_id").getAsString());
      case "fireworks" ->
          new Fireworks(
                  activity, type, c.get("show_start_ms").getAsLong(), c.get("slot_ms").getAsLong())
              .win(user, c.get("now_ms").getAsLong(), c.get("amount").getAsLong());
      default -> throw new AssertionError("unknown scene " + c.get("scene"));
    };
  }

  @Test
  void everySceneVector() throws Exception {
    var scenes = Scenarios.load().getAsJsonArray("scenes");
    assertFalse(scenes.isEmpty(), "no scene vectors");
    for (JsonElement e : scenes) {
      JsonObject c = e.getAsJsonObject();
      JsonObject want = c.getAsJsonObject("want");
      Reward r = build(c);
      Map<String, String> ext = new LinkedHashMap<>();
      want.getAsJsonObject("extension")
          .entrySet()
          .forEach(x -> ext.put(x.getKey(), x.getValue().getAsString()));
      String scene = c.get("scene").getAsString();
      assertEquals(want.get("trade_no").getAsString(), r.tradeNo(), scene);
      assertEquals(want.get("activity_id").getAsString(), r.activityId(), scene);
      assertEquals(want.get("scene_id").getAsString(), r.sceneId(), scene);
      assertEquals(want.get("reward_type").getAsString(), r.rewardType(), scene);
      assertEquals(want.get("amount").getAsLong(), r.amount(), scene);
      assertEquals(want.get("description").getAsString(), r.description(), scene);
      assertEquals(ext, r.extension(), scene);
      assertEquals(c.get("user_id").getAsString(), r.user().userId(), scene);
    }
  }

  @Test
  void theSameRewardAskedTwiceCarriesOneTradeNumber() {
    var rain = new RedEnvelopeRain("a1", "cash");
    assertEquals(
        rain.grab(User.of("u1"), 2, 5).tradeNo(), rain.grab(User.of("u1"), 2, 7).tradeNo());
    assertNotEquals(
        rain.grab(User.of("u1"), 2, 5).tradeNo(), rain.grab(User.of("u1"), 3, 5).tradeNo());
  }

  @Test
  void aNegativeRoundIsRefused() {
    assertThrows(
        IllegalArgumentException.class,
        () -> new RedEnvelopeRain("a1", "cash").grab(User.of("u1"), -1, 5));
  }

  @Test
  void aBuiltRewardsExtensionCannotBeChangedAfterwards() {
    Reward r = Reward.builder().tradeNo("t1").extension("k", "v").build();
    assertThrows(UnsupportedOperationException.class, () -> r.extension().put("k", "w"));
  }
}
