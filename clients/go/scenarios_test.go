package rewardagent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// scenarios is clients/conformance/scenarios.json, the one description every client runs.
type scenarios struct {
	Base      map[string]any `json:"base"`
	Scenes    []sceneCase    `json:"scenes"`
	BadInputs []struct {
		Name  string         `json:"name"`
		Set   map[string]any `json:"set"`
		Code  string         `json:"code"`
		Field string         `json:"field"`
	} `json:"bad_inputs"`
	Batch     struct{ Size int } `json:"batch"`
	OverBatch struct{ Size int } `json:"over_batch"`
	Kill      struct {
		Rewards          int `json:"rewards"`
		Batch            int `json:"batch"`
		KillAfterBatches int `json:"kill_after_batches"`
		Senders          int `json:"senders"`
	} `json:"kill"`
}

type sceneCase struct {
	Scene       string `json:"scene"`
	ActivityID  string `json:"activity_id"`
	RewardType  string `json:"reward_type"`
	UserID      string `json:"user_id"`
	Round       uint64 `json:"round"`
	Amount      int64  `json:"amount"`
	Draw        uint64 `json:"draw"`
	CardID      string `json:"card_id"`
	ShowStartMs int64  `json:"show_start_ms"`
	SlotMs      int64  `json:"slot_ms"`
	NowMs       int64  `json:"now_ms"`
	Want        struct {
		TradeNo     string            `json:"trade_no"`
		ActivityID  string            `json:"activity_id"`
		SceneID     string            `json:"scene_id"`
		RewardType  string            `json:"reward_type"`
		Amount      int64             `json:"amount"`
		Description string            `json:"description"`
		Extension   map[string]string `json:"extension"`
	} `json:"want"`
}

func loadScenarios(t *testing.T) scenarios {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "conformance", "scenarios.json"))
	if err != nil {
		t.Fatalf("the shared scenarios: %v", err)
	}
	var s scenarios
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("the shared scenarios: %v", err)
	}
	return s
}
