package rewardagent

import "fmt"

// User is who wins a reward: the user id, and optionally the device and app.
type User struct {
	UserID   string
	DeviceID string
	AppID    string
}

// Reward is one reward as the activity service asks for it. TradeNo is the global
// idempotency key: the same reward always carries the same one.
type Reward struct {
	TradeNo     string
	User        *User
	ActivityID  string
	SceneID     string
	RewardType  string
	Amount      int64
	Description string
	Extension   map[string]string
}

// TradeNo is the trade number of a scene reward: activity:scene:round:user.
func TradeNo(activityID, sceneID string, round uint64, userID string) string {
	return fmt.Sprintf("%s:%s:%d:%s", activityID, sceneID, round, userID)
}

func scene(activityID, sceneID, rewardType string, user User, round uint64, amount int64) Reward {
	u := user
	return Reward{
		TradeNo:    TradeNo(activityID, sceneID, round, user.UserID),
		User:       &u,
		ActivityID: activityID,
		SceneID:    sceneID,
		RewardType: rewardType,
		Amount:     amount,
		Extension:  map[string]string{},
	}
}

// RedEnvelopeRain is a red-envelope rain: one reward per user per numbered round.
type RedEnvelopeRain struct {
	ActivityID string
	RewardType string
}

// Grab is the reward of a user who caught an envelope in round.
func (r RedEnvelopeRain) Grab(user User, round uint64, amount int64) Reward {
	w := scene(r.ActivityID, "rain", r.RewardType, user, round, amount)
	w.Description = "red envelope"
	return w
}

// CardCollection is a card collection: each draw gives one card; the draw number is
// the round.
type CardCollection struct {
	ActivityID string
	RewardType string
}

// Draw is the card a user drew with their draw-th draw.
func (c CardCollection) Draw(user User, draw uint64, cardID string) Reward {
	w := scene(c.ActivityID, "cards", c.RewardType, user, draw, 1)
	w.Description = "card " + cardID
	w.Extension["card"] = cardID
	return w
}

// Fireworks is a fireworks show: a user wins at most once per slot of the show; the
// slot is the round.
type Fireworks struct {
	ActivityID  string
	RewardType  string
	ShowStartMs int64
	SlotMs      int64
}

// SlotAt is the slot a moment (Unix ms) falls in; 0 before the show starts.
func (f Fireworks) SlotAt(nowMs int64) uint64 {
	slot := f.SlotMs
	if slot < 1 {
		slot = 1
	}
	since := nowMs - f.ShowStartMs
	if since < 0 {
		since = 0
	}
	return uint64(since / slot)
}

// Win is the reward of a user who won at nowMs (Unix ms).
func (f Fireworks) Win(user User, nowMs int64, amount int64) Reward {
	w := scene(f.ActivityID, "fireworks", f.RewardType, user, f.SlotAt(nowMs), amount)
	w.Description = "fireworks"
	return w
}
