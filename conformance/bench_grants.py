"""GrantBatch grants a second from a Python client (grpcio), as a foreign client gets
them: `channels` channels, each a thread sending batches of `batch` new trade numbers
until `grants` are granted. Prints one JSON line. `reward-bench grant --python PY`
runs it against the service it measures, in the same sitting.

The grant credential comes from REWARD_SERVICE_TOKEN (never an argument).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stubs import generate_stubs  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--addr", required=True, help="the service's gRPC host:port")
    p.add_argument("--grants", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--channels", type=int, default=8)
    p.add_argument("--activity", default="bench")
    p.add_argument("--scene", default="py")
    p.add_argument("--tag", default=f"{os.getpid():x}", help="makes the trade numbers unique")
    a = p.parse_args()
    token = os.environ.get("REWARD_SERVICE_TOKEN")
    if not token:
        print("set REWARD_SERVICE_TOKEN (the grant credential)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as out:
        generate_stubs(Path(out))
        from reward.v1 import event_pb2, service_pb2, service_pb2_grpc

        md = [("authorization", f"Bearer {token}")]
        now = int(time.time() * 1000)
        batches = [
            [
                event_pb2.RewardEvent(
                    trade_no=f"py:{a.tag}:{i}",
                    user=event_pb2.UserInfo(user_id=f"py{i % 1000}"),
                    activity_id=a.activity,
                    scene_id=a.scene,
                    reward_type="cash",
                    amount=1,
                    created_at_ms=now,
                )
                for i in range(b, min(b + a.batch, a.grants))
            ]
            for b in range(0, a.grants, a.batch)
        ]
        lock = threading.Lock()
        latencies: list[float] = []
        outcomes = {"granted": 0, "other": 0}
        nxt = [0]

        def work():
            ch = grpc.insecure_channel(a.addr)
            stub = service_pb2_grpc.RewardServiceStub(ch)
            while True:
                with lock:
                    if nxt[0] >= len(batches):
                        break
                    batch = batches[nxt[0]]
                    nxt[0] += 1
                t = time.perf_counter()
                res = stub.GrantBatch(service_pb2.GrantBatchRequest(events=batch), metadata=md, timeout=60).results
                dt = time.perf_counter() - t
                granted = sum(1 for r in res if r.outcome == service_pb2.GRANTED)
                with lock:
                    latencies.append(dt)
                    outcomes["granted"] += granted
                    outcomes["other"] += len(res) - granted
            ch.close()

        threads = [threading.Thread(target=work) for _ in range(a.channels)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        secs = time.perf_counter() - started
        latencies.sort()
        pct = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else 0.0
        print(json.dumps({
            "grants": a.grants,
            "granted": outcomes["granted"],
            "not_granted": outcomes["other"],
            "secs": round(secs, 3),
            "rate": round(outcomes["granted"] / secs, 1) if secs > 0 else 0.0,
            "batch_p50_ms": round(pct(0.5), 2),
            "batch_p99_ms": round(pct(0.99), 2),
            "channels": a.channels,
            "batch": a.batch,
        }))
        return 0 if outcomes["other"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
