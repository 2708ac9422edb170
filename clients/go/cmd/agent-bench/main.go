// Command agent-bench sends rewards through an agent as fast as BENCH_CONCURRENCY
// senders can, one reward a call, and writes the rate and the call latencies to
// CONFORMANCE_OUT/go.bench.json; every answered reward is also appended to
// CONFORMANCE_OUT/go.bench.sent.tsv for the books. Run by agent/tests/clients.rs with
// REWARD_CLIENTS_BENCH set (the variables of clients/conformance/README.md, plus
// BENCH_REWARDS and BENCH_CONCURRENCY).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"rewardagent"
)

func need(name string) string {
	v := os.Getenv(name)
	if v == "" {
		fmt.Fprintf(os.Stderr, "agent-bench: %s is not set\n", name)
		os.Exit(2)
	}
	return v
}

func number(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "agent-bench: %s=%q is not a positive number\n", name, v)
			os.Exit(2)
		}
		return n
	}
	return def
}

func main() {
	socket, tag, out := need("REWARD_AGENT_SOCKET"), need("CONFORMANCE_TAG")+"-go", need("CONFORMANCE_OUT")
	n, workers := number("BENCH_REWARDS", 10000), number("BENCH_CONCURRENCY", 16)
	agent, err := rewardagent.DialUnix(socket, rewardagent.WithTimeout(30*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent-bench:", err)
		os.Exit(1)
	}
	defer agent.Close()
	rain := rewardagent.RedEnvelopeRain{ActivityID: tag, RewardType: "cash"}
	lat := make([]time.Duration, n)
	tokens := make([]string, n)
	held := make([]bool, n)
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				r := rain.Grab(rewardagent.User{UserID: fmt.Sprintf("b%d", i)}, 1, 5)
				t := time.Now()
				issued, err := agent.SendSettled(context.Background(), r, 30*time.Second)
				lat[i] = time.Since(t)
				if err != nil {
					failed.Add(1)
					continue
				}
				tokens[i], held[i] = issued.Token, issued.HeldBy == rewardagent.HeldByStore
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if f := failed.Load(); f > 0 {
		fmt.Fprintf(os.Stderr, "agent-bench: %d rewards not issued\n", f)
		os.Exit(1)
	}
	sentLog, err := os.OpenFile(filepath.Join(out, "go.bench.sent.tsv"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent-bench:", err)
		os.Exit(1)
	}
	defer sentLog.Close()
	now := time.Now().UnixMilli()
	for i := range n {
		stored := 0
		if held[i] {
			stored = 1
		}
		fmt.Fprintf(sentLog, "%s\t%s\t%s\train\tcash\t5\t%d\t%d\t0\t%s\n",
			rewardagent.TradeNo(tag, "rain", 1, fmt.Sprintf("b%d", i)), fmt.Sprintf("b%d", i), tag, now, stored, tokens[i])
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	ms := func(q float64) float64 { return float64(lat[int(q*float64(n-1))].Microseconds()) / 1000 }
	report := map[string]any{"lang": "go", "rewards": n, "concurrency": workers, "secs": secs,
		"rate": float64(n) / secs, "p50_ms": ms(0.50), "p99_ms": ms(0.99)}
	text, _ := json.Marshal(report)
	if err := os.WriteFile(filepath.Join(out, "go.bench.json"), text, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "agent-bench:", err)
		os.Exit(1)
	}
	fmt.Println(string(text))
}
