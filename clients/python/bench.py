"""Sends rewards through an agent as fast as BENCH_CONCURRENCY threads can, one reward a
call, and writes the rate and the call latencies to CONFORMANCE_OUT/python.bench.json;
every answered reward is also appended to CONFORMANCE_OUT/python.bench.sent.tsv for the books.
Run by agent/tests/clients.rs with REWARD_CLIENTS_BENCH set (the variables of
clients/conformance/README.md, plus BENCH_REWARDS and BENCH_CONCURRENCY)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

from reward_agent import AgentClient, HeldBy, RedEnvelopeRain, RewardError, User  # noqa: E402


def need(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise SystemExit(f"bench.py: {name} is not set")
    return value


def main() -> None:
    tag = f"{need('CONFORMANCE_TAG')}-python"
    out = Path(need("CONFORMANCE_OUT"))
    n = int(os.environ.get("BENCH_REWARDS", "10000"))
    workers = int(os.environ.get("BENCH_CONCURRENCY", "16"))
    rain = RedEnvelopeRain(tag, "cash")
    lat = [0.0] * n
    issued: list = [None] * n
    failed = []
    counter = iter(range(n))
    lock = threading.Lock()
    with AgentClient.unix(need("REWARD_AGENT_SOCKET"), timeout=30.0) as agent:

        def work() -> None:
            while True:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                t = time.perf_counter()
                try:
                    issued[i] = agent.send_settled(rain.grab(User(f"b{i}"), 1, 5), within=30.0)
                except RewardError as e:
                    failed.append(str(e))
                lat[i] = time.perf_counter() - t

        start = time.perf_counter()
        threads = [threading.Thread(target=work) for _ in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        secs = time.perf_counter() - start
    if failed:
        raise SystemExit(f"bench.py: {len(failed)} rewards not issued, first: {failed[0]}")
    now = int(time.time() * 1000)
    with open(out / "python.bench.sent.tsv", "a") as f:
        for i, r in enumerate(issued):
            stored = int(r.held_by == HeldBy.STORE)
            f.write(f"{r.trade_no}\tb{i}\t{tag}\train\tcash\t5\t{now}\t{stored}\t0\t{r.token}\n")
    lat.sort()
    report = {
        "lang": "python",
        "rewards": n,
        "concurrency": workers,
        "secs": secs,
        "rate": n / secs,
        "p50_ms": lat[int(0.50 * (n - 1))] * 1000,
        "p99_ms": lat[int(0.99 * (n - 1))] * 1000,
    }
    (out / "python.bench.json").write_text(json.dumps(report))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
