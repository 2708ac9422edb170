//go:build agent

// The shared scenarios (clients/conformance/scenarios.json) against a real agent. Run
// by the stack tier's harness (agent/tests/clients.rs, through ops/test):
//
//	go test -tags agent -run TestAgent ./...
//
// which starts the agent and sets the variables of clients/conformance/README.md;
// without them every test here fails, never skips.
package rewardagent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const lang = "go"

func need(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run the client tests through ops/test (agent/tests/clients.rs)", name)
	}
	return v
}

func callTimeout() time.Duration {
	if s, err := strconv.ParseFloat(os.Getenv("CONFORMANCE_TIMEOUT_S"), 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	return 5 * time.Second
}

func tag(t *testing.T) string { return need(t, "CONFORMANCE_TAG") + "-" + lang }

// sentLog appends the books' sent line (tools/src/books/sent.rs) and the token of each
// issued reward to CONFORMANCE_OUT/go.sent.tsv, for the harness.
type sentLog struct {
	mu sync.Mutex
	f  *os.File
}

var logOnce struct {
	sync.Once
	log *sentLog
	err error
}

func sent(t *testing.T) *sentLog {
	t.Helper()
	out := need(t, "CONFORMANCE_OUT")
	logOnce.Do(func() {
		if err := os.MkdirAll(out, 0o755); err != nil {
			logOnce.err = err
			return
		}
		f, err := os.OpenFile(filepath.Join(out, lang+".sent.tsv"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		logOnce.log, logOnce.err = &sentLog{f: f}, err
	})
	if logOnce.err != nil {
		t.Fatalf("the sent log: %v", logOnce.err)
	}
	return logOnce.log
}

func (l *sentLog) record(t *testing.T, r Reward, i Issued) {
	t.Helper()
	stored := 0
	if i.HeldBy == HeldByStore {
		stored = 1
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := fmt.Fprintf(l.f, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t0\t%s\n", r.TradeNo, r.User.UserID,
		r.ActivityID, r.SceneID, r.RewardType, r.Amount, time.Now().UnixMilli(), stored, i.Token)
	if err != nil {
		t.Fatalf("the sent log: %v", err)
	}
}

// expand turns {"repeat": C, "count": N} into C repeated N times, everywhere.
func expand(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if rep, ok := x["repeat"].(string); ok && len(x) == 2 {
			if n, ok := x["count"].(float64); ok {
				return strings.Repeat(rep, int(n))
			}
		}
		out := map[string]any{}
		for k, e := range x {
			out[k] = expand(e)
		}
		return out
	default:
		return v
	}
}

// reward is the scenarios' base with set laid over it, {tag} and {user} filled in.
func reward(t *testing.T, s scenarios, tg, user string, set map[string]any) Reward {
	t.Helper()
	doc := map[string]any{}
	for k, v := range s.Base {
		doc[k] = v
	}
	for k, v := range set {
		doc[k] = expand(v)
	}
	fill := func(v any) string {
		str, _ := v.(string)
		return strings.ReplaceAll(strings.ReplaceAll(str, "{tag}", tg), "{user}", user)
	}
	str := func(v any) string { s, _ := v.(string); return s }
	r := Reward{
		TradeNo:     fill(doc["trade_no"]),
		ActivityID:  fill(doc["activity_id"]),
		SceneID:     str(doc["scene_id"]),
		RewardType:  str(doc["reward_type"]),
		Description: str(doc["description"]),
		Extension:   map[string]string{},
	}
	amount, ok := doc["amount"].(float64)
	if !ok {
		t.Fatalf("amount %v is not a number", doc["amount"])
	}
	r.Amount = int64(amount)
	if u, ok := doc["user"].(map[string]any); ok {
		r.User = &User{UserID: fill(u["user_id"]), DeviceID: str(u["device_id"]), AppID: str(u["app_id"])}
	}
	if ext, ok := doc["extension"].(map[string]any); ok {
		for k, v := range ext {
			r.Extension[k] = str(v)
		}
	}
	return r
}

func dialAgent(t *testing.T, socket string, timeout time.Duration) *Client {
	t.Helper()
	c, err := DialUnix(socket, WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAgentOneRewardIsIssuedWithAToken(t *testing.T) {
	s, tg, log := loadScenarios(t), tag(t), sent(t)
	c := dialAgent(t, need(t, "REWARD_AGENT_SOCKET"), callTimeout())
	defer c.Close()
	r := reward(t, s, tg, "u-one", nil)
	i, err := c.Send(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if i.TradeNo != r.TradeNo || i.Token == "" || i.HeldBy == HeldByUnspecified {
		t.Fatalf("issued %+v", i)
	}
	log.record(t, r, i)
}

func TestAgentABatchAnswersEachRewardInOrder(t *testing.T) {
	s, tg, log := loadScenarios(t), tag(t), sent(t)
	c := dialAgent(t, need(t, "REWARD_AGENT_SOCKET"), callTimeout())
	defer c.Close()
	var rs []Reward
	for i := range s.Batch.Size {
		rs = append(rs, reward(t, s, tg, fmt.Sprintf("u-batch-%d", i), nil))
	}
	answers := c.SendBatch(context.Background(), rs)
	if len(answers) != len(rs) {
		t.Fatalf("%d answers for %d rewards", len(answers), len(rs))
	}
	for i, a := range answers {
		if a.Err != nil {
			t.Fatalf("%s: %v", rs[i].TradeNo, a.Err)
		}
		if a.Issued.TradeNo != rs[i].TradeNo {
			t.Fatalf("answer %d is for %s, not %s", i, a.Issued.TradeNo, rs[i].TradeNo)
		}
		log.record(t, rs[i], a.Issued)
	}
}

func TestAgentARepeatedTradeNumberIsAnsweredAgainAndCreditedOnce(t *testing.T) {
	s, tg, log := loadScenarios(t), tag(t), sent(t)
	c := dialAgent(t, need(t, "REWARD_AGENT_SOCKET"), callTimeout())
	defer c.Close()
	r := reward(t, s, tg, "u-repeat", nil)
	first, err := c.Send(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Send(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if first.TradeNo != r.TradeNo || again.TradeNo != r.TradeNo {
		t.Fatalf("answered %s and %s for %s", first.TradeNo, again.TradeNo, r.TradeNo)
	}
	log.record(t, r, first)
}

func TestAgentEveryBadInputIsRefusedWithItsCodeAndField(t *testing.T) {
	s, tg := loadScenarios(t), tag(t)
	c := dialAgent(t, need(t, "REWARD_AGENT_SOCKET"), callTimeout())
	defer c.Close()
	if len(s.BadInputs) == 0 {
		t.Fatal("no bad inputs")
	}
	for _, bad := range s.BadInputs {
		_, err := c.Send(context.Background(), reward(t, s, tg, "u-bad", bad.Set))
		e, ok := err.(*Error)
		if !ok {
			t.Errorf("%s: answered %v, not refused", bad.Name, err)
			continue
		}
		if e.Code != bad.Code || e.Field != bad.Field || e.Resend() {
			t.Errorf("%s: %v (resend %v), want %s on %s", bad.Name, e, e.Resend(), bad.Code, bad.Field)
		}
	}
}

func TestAgentABatchOverTheLimitIsRefusedWhole(t *testing.T) {
	s, tg := loadScenarios(t), tag(t)
	c := dialAgent(t, need(t, "REWARD_AGENT_SOCKET"), callTimeout())
	defer c.Close()
	var rs []Reward
	for i := range s.OverBatch.Size {
		rs = append(rs, reward(t, s, tg, fmt.Sprintf("u-over-%d", i), nil))
	}
	for _, a := range c.SendBatch(context.Background(), rs) {
		if a.Err == nil || a.Err.Code != "INVALID_ARGUMENT" || a.Err.Resend() {
			t.Fatalf("a reward of an over-limit batch answered %+v", a)
		}
	}
}

// An agent of the test's own, on a private socket and spool.
type ownAgent struct {
	cmd    *exec.Cmd
	exited chan error
	socket string
	log    string
}

func startAgent(t *testing.T, dir string) *ownAgent {
	t.Helper()
	a := &ownAgent{socket: filepath.Join(dir, "kill.sock"), log: filepath.Join(dir, "agent.log"),
		exited: make(chan error, 1)}
	out, err := os.OpenFile(a.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	a.cmd = exec.Command(need(t, "REWARD_AGENT_BIN"), "--config", need(t, "REWARD_AGENT_CONFIG"))
	a.cmd.Env = append(os.Environ(),
		"REWARD_AGENT__LISTEN__SOCKET="+a.socket,
		"REWARD_AGENT__ADMIN__ADDR=127.0.0.1:0",
		"REWARD_SDK__SPOOL__DIR="+filepath.Join(dir, "spool"))
	a.cmd.Stdout, a.cmd.Stderr = out, out
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.exited <- a.cmd.Wait() }()
	t.Cleanup(func() { _ = a.cmd.Process.Kill() }) // a failed test leaves no agent behind
	until := time.Now().Add(60 * time.Second)
	for time.Now().Before(until) {
		select {
		case err := <-a.exited:
			t.Fatalf("the agent exited (%v); log %s", err, a.log)
		default:
		}
		if _, err := os.Stat(a.socket); err == nil {
			c := dialAgent(t, a.socket, time.Second)
			ok := c.Serving(context.Background())
			c.Close()
			if ok {
				return a
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the agent did not serve within 60 s; log %s", a.log)
	return nil
}

// signal sends sig and waits up to a minute for the agent to exit.
func (a *ownAgent) signal(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := a.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.exited:
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("the agent did not exit within 60 s of %v; log %s", sig, a.log)
		return nil
	}
}

// SIGKILL while batches flow, restart, resend every unanswered reward with its trade
// number: every answered one is recorded for the harness, which checks each is
// credited once.
func TestAgentKilledMidBatchLosesNoAnsweredReward(t *testing.T) {
	s, tg, log := loadScenarios(t), tag(t), sent(t)
	// A short path: a Unix socket's path must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "ra-go-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	k := s.Kill
	var rewards []Reward
	for i := range k.Rewards {
		rewards = append(rewards, reward(t, s, tg, fmt.Sprintf("u-kill-%d", i), nil))
	}
	var batches [][]Reward
	for i := 0; i < len(rewards); i += k.Batch {
		batches = append(batches, rewards[i:min(i+k.Batch, len(rewards))])
	}

	var mu sync.Mutex
	answered := map[string]Issued{}
	var unanswered []Reward
	var forGood []string
	settle := func(batch []Reward, answers []Answer) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for i, a := range answers {
			switch {
			case a.Err == nil:
				answered[batch[i].TradeNo] = a.Issued
				n++
			case a.Err.Resend():
				unanswered = append(unanswered, batch[i])
			default:
				forGood = append(forGood, a.Err.Error())
			}
		}
		return n
	}

	agent := startAgent(t, dir)
	c := dialAgent(t, agent.socket, 30*time.Second)
	// The batches before the kill, one after another, as a service sends them.
	for _, b := range batches[:k.KillAfterBatches] {
		settle(b, c.SendBatch(context.Background(), b))
	}
	// The rest from several senders at once; the agent is killed once one of them was
	// answered, so the kill lands while the agent is taking batches, and the batches
	// not sent by then find it gone.
	queue := make(chan []Reward, len(batches))
	for _, b := range batches[k.KillAfterBatches:] {
		queue <- b
	}
	close(queue)
	firstAnswer := make(chan struct{})
	var once sync.Once
	var senders sync.WaitGroup
	for range k.Senders {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for b := range queue {
				settle(b, c.SendBatch(context.Background(), b))
				once.Do(func() { close(firstAnswer) })
			}
		}()
	}
	<-firstAnswer
	if err := agent.signal(t, syscall.SIGKILL); err == nil {
		t.Fatal("the killed agent exited 0")
	}
	done := make(chan struct{})
	go func() { senders.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		t.Fatal("a batch call did not return within 120 s of the kill")
	}
	c.Close()
	if len(forGood) > 0 {
		t.Fatalf("refused for good while the agent was up or killed: %v", forGood[:min(5, len(forGood))])
	}
	if len(unanswered) == 0 {
		t.Fatal("the kill cut no call: the scenario proved nothing")
	}

	agent = startAgent(t, dir)
	c = dialAgent(t, agent.socket, 10*time.Second)
	for _, r := range unanswered {
		i, err := c.SendSettled(context.Background(), r, 30*time.Second)
		if err != nil {
			t.Fatalf("%s after the restart: %v", r.TradeNo, err)
		}
		answered[r.TradeNo] = i
	}
	c.Close()
	stopping := time.Now()
	if err := agent.signal(t, syscall.SIGTERM); err != nil {
		t.Fatalf("the agent did not stop cleanly (%v); log %s", err, agent.log)
	}
	t.Logf("%d answered before the kill, %d resent after it; the restarted agent stopped in %v",
		len(rewards)-len(unanswered), len(unanswered), time.Since(stopping).Round(time.Millisecond))
	if len(answered) != len(rewards) {
		t.Fatalf("%d of %d rewards answered", len(answered), len(rewards))
	}
	for _, r := range rewards {
		log.record(t, r, answered[r.TradeNo])
	}
}
