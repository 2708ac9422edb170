package rewardagent

import (
	"maps"
	"testing"
)

func build(t *testing.T, c sceneCase) Reward {
	t.Helper()
	u := User{UserID: c.UserID}
	switch c.Scene {
	case "rain":
		return RedEnvelopeRain{c.ActivityID, c.RewardType}.Grab(u, c.Round, c.Amount)
	case "cards":
		return CardCollection{c.ActivityID, c.RewardType}.Draw(u, c.Draw, c.CardID)
	case "fireworks":
		return Fireworks{c.ActivityID, c.RewardType, c.ShowStartMs, c.SlotMs}.Win(u, c.NowMs, c.Amount)
	}
	t.Fatalf("unknown scene %q", c.Scene)
	return Reward{}
}

func TestEverySceneVector(t *testing.T) {
	s := loadScenarios(t)
	if len(s.Scenes) == 0 {
		t.Fatal("no scene vectors")
	}
	for _, c := range s.Scenes {
		r := build(t, c)
		w := c.Want
		if r.TradeNo != w.TradeNo || r.ActivityID != w.ActivityID || r.SceneID != w.SceneID ||
			r.RewardType != w.RewardType || r.Amount != w.Amount || r.Description != w.Description ||
			!maps.Equal(r.Extension, w.Extension) {
			t.Errorf("%s: built %+v, want %+v", c.Scene, r, w)
		}
		if r.User == nil || r.User.UserID != c.UserID {
			t.Errorf("%s: user %+v", c.Scene, r.User)
		}
	}
}

func TestTheSameRewardAskedTwiceCarriesOneTradeNumber(t *testing.T) {
	rain := RedEnvelopeRain{"a1", "cash"}
	u := User{UserID: "u1"}
	if rain.Grab(u, 2, 5).TradeNo != rain.Grab(u, 2, 7).TradeNo {
		t.Error("one round, two trade numbers")
	}
	if rain.Grab(u, 2, 5).TradeNo == rain.Grab(u, 3, 5).TradeNo {
		t.Error("two rounds, one trade number")
	}
}

func TestScenesDoNotShareTheirUserOrExtension(t *testing.T) {
	cards := CardCollection{"a1", "card"}
	u := User{UserID: "u1"}
	a, b := cards.Draw(u, 1, "x"), cards.Draw(u, 2, "y")
	a.User.UserID = "changed"
	a.Extension["card"] = "changed"
	if b.User.UserID != "u1" || b.Extension["card"] != "y" || u.UserID != "u1" {
		t.Error("two rewards share their user or extension")
	}
}
