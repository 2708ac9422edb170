"""The reward API's contract, checked by a client written from the .proto files and
docs/api.md alone, against the real service (see conftest.py for how it runs)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import token_spec  # noqa: E402  (this directory's token implementation)

GRANT = [("authorization", "Bearer " + os.environ.get("REWARD_SERVICE_TOKEN", ""))]
ADMIN = [("authorization", "Bearer " + os.environ.get("REWARD_ADMIN_TOKEN", ""))]
FINAL = {"GRANTED", "DUPLICATE", "CONFLICT", "BUDGET_EXHAUSTED", "FAILED_PERMANENT", "INVALID", "IN_DOUBT"}
RESEND = {"RETRY_LATER", "FAILED_RETRYABLE"}
# Call-level statuses whose outcome is unknown: resend the same request.
IN_DOUBT_STATUSES = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
}


def now_ms() -> int:
    return int(time.time() * 1000)


def name(stubs, outcome: int) -> str:
    return stubs.service.GrantOutcome.Name(outcome)


def event(stubs, trade_no, user="u1", amount=1, scene="rain", activity="cny", reward_type="cash", created=None):
    return stubs.event.RewardEvent(
        trade_no=trade_no,
        user=stubs.event.UserInfo(user_id=user),
        activity_id=activity,
        scene_id=scene,
        reward_type=reward_type,
        amount=amount,
        created_at_ms=now_ms() if created is None else created,
    )


@pytest.fixture()
def client(stubs, service):
    ch = grpc.insecure_channel(service.addr)
    yield stubs.service_grpc.RewardServiceStub(ch)
    ch.close()


@pytest.fixture()
def admin(stubs, service):
    ch = grpc.insecure_channel(service.addr)
    yield stubs.admin_grpc.BudgetAdminStub(ch)
    ch.close()


def grant(stubs, client, ev, md=GRANT):
    return client.Grant(stubs.service.GrantRequest(event=ev), metadata=md, timeout=30).result


def test_authentication_follows_the_header_rules(stubs, client, tag):
    ev = event(stubs, f"conf:{tag}:auth")
    for md in ([], [("authorization", "Bearer wrong-credential-000000")], ADMIN, [("authorization", "Basic x")]):
        with pytest.raises(grpc.RpcError) as e:
            grant(stubs, client, ev, md)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, md
    lower = [("authorization", "bearer " + os.environ["REWARD_SERVICE_TOKEN"])]
    assert name(stubs, grant(stubs, client, ev, lower).outcome) == "GRANTED"


def test_a_repeat_is_duplicate_with_the_same_receipt_and_a_changed_repeat_conflicts(stubs, client, tag):
    ev = event(stubs, f"conf:{tag}:rep", user="u7", amount=5)
    first = grant(stubs, client, ev)
    assert name(stubs, first.outcome) == "GRANTED" and first.downstream_ref
    again = grant(stubs, client, ev)
    assert (name(stubs, again.outcome), again.downstream_ref) == ("DUPLICATE", first.downstream_ref)
    changed = event(stubs, f"conf:{tag}:rep", user="u7", amount=6)
    got = grant(stubs, client, changed)
    assert (name(stubs, got.outcome), got.error_code) == ("CONFLICT", "CONFLICT")


def test_a_batch_answers_each_event_with_its_index_and_claims_a_repeat_once(stubs, client, tag):
    a = event(stubs, f"conf:{tag}:ba", amount=2)
    batch = [a, a, event(stubs, f"conf:{tag}:ba", amount=3), event(stubs, ""), event(stubs, f"conf:{tag}:bb")]
    res = client.GrantBatch(stubs.service.GrantBatchRequest(events=batch), metadata=GRANT, timeout=30).results
    got = [(r.index, r.trade_no, name(stubs, r.outcome), r.error_code) for r in res]
    assert got == [
        (0, a.trade_no, "GRANTED", ""),
        (1, a.trade_no, "DUPLICATE", ""),
        (2, a.trade_no, "CONFLICT", "CONFLICT"),
        (3, "", "INVALID", "INVALID"),
        (4, f"conf:{tag}:bb", "GRANTED", ""),
    ]
    assert res[1].downstream_ref == res[0].downstream_ref != ""


def test_bad_inputs_get_the_documented_errors(stubs, client, service, tag):
    ch = grpc.insecure_channel(service.addr)
    raw = ch.unary_unary(
        "/reward.v1.RewardService/GrantBatch",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError) as e:
        raw(b"\x0f\xff\xff", metadata=GRANT, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    ch.close()
    with pytest.raises(grpc.RpcError) as e:
        client.Grant(stubs.service.GrantRequest(), metadata=GRANT, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    too_many = [event(stubs, f"conf:{tag}:many:{i}") for i in range(1001)]
    with pytest.raises(grpc.RpcError) as e:
        client.GrantBatch(stubs.service.GrantBatchRequest(events=too_many), metadata=GRANT, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    cases = [
        ("trade_no", event(stubs, "t" * 201)),
        ("trade_no", event(stubs, "has space")),
        ("user.user_id", event(stubs, f"conf:{tag}:bad1", user="u" * 65)),
        ("amount", event(stubs, f"conf:{tag}:bad2", amount=0)),
        ("description", None),
        ("created_at_ms", event(stubs, f"conf:{tag}:bad3", created=0)),
        ("created_at_ms", event(stubs, f"conf:{tag}:bad4", created=now_ms() + 600_000)),
    ]
    long_description = event(stubs, f"conf:{tag}:bad5")
    long_description.description = "d" * 257
    cases[4] = ("description", long_description)
    for field, ev in cases:
        r = grant(stubs, client, ev)
        assert (name(stubs, r.outcome), r.error_code) == ("INVALID", "INVALID"), (field, r)
        assert r.message.startswith(field), (field, r.message)


def test_budgets_over_the_admin_api(stubs, client, admin, tag):
    scene = f"b{tag}"
    get = stubs.admin.GetBudgetRequest(activity_id="cny", scene_id=scene)
    with pytest.raises(grpc.RpcError) as e:
        admin.GetBudget(get, metadata=GRANT, timeout=30)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    b = admin.GetBudget(get, metadata=ADMIN, timeout=30)
    assert (b.configured, b.total, b.spent) == (False, 0, 0)
    r = grant(stubs, client, event(stubs, f"conf:{tag}:nb", scene=scene, amount=4))
    assert (name(stubs, r.outcome), r.error_code) == ("BUDGET_EXHAUSTED", "NO_BUDGET")
    s = admin.SetBudget(stubs.admin.SetBudgetRequest(activity_id="cny", scene_id=scene, total=10, reason="conformance"), metadata=ADMIN, timeout=30)
    assert (s.before.total, s.after.total, s.after.remaining) == (0, 10, 10)
    # The same request, resent after the budget exists, is credited (nothing was recorded).
    r = grant(stubs, client, event(stubs, f"conf:{tag}:nb", scene=scene, amount=4))
    assert name(stubs, r.outcome) == "GRANTED"
    r = grant(stubs, client, event(stubs, f"conf:{tag}:big", scene=scene, amount=7))
    assert (name(stubs, r.outcome), r.error_code) == ("BUDGET_EXHAUSTED", "BUDGET_EXHAUSTED")
    with pytest.raises(grpc.RpcError) as e:
        admin.SetBudget(stubs.admin.SetBudgetRequest(activity_id="cny", scene_id=scene, total=3), metadata=ADMIN, timeout=30)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    admin.SetBudget(stubs.admin.SetBudgetRequest(activity_id="cny", scene_id=scene, total=11), metadata=ADMIN, timeout=30)
    r = grant(stubs, client, event(stubs, f"conf:{tag}:big", scene=scene, amount=7))
    assert name(stubs, r.outcome) == "GRANTED"
    b = admin.GetBudget(get, metadata=ADMIN, timeout=30)
    assert (b.configured, b.total, b.spent, b.remaining) == (True, 11, 11, 0)


def test_kill_9_mid_run_with_resends_until_final_credits_each_reward_once(stubs, admin, service, tag, work_dir):
    scene = f"k{tag}"
    admin.SetBudget(stubs.admin.SetBudgetRequest(activity_id="cny", scene_id=scene, total=1_000_000), metadata=ADMIN, timeout=30)
    n, workers, per_batch = 6000, 4, 50
    # Users of this test alone: the harness checks their ledger balances afterwards.
    events = [event(stubs, f"conf:{tag}:k{i}", user=f"k{i % 50}", amount=1 + i % 3, scene=scene) for i in range(n)]
    final: dict[str, tuple[str, str]] = {}
    problems: list[str] = []
    lock = threading.Lock()
    stats = {"in_doubt_calls": 0, "resends": 0}
    kills = [0]  # kills so far
    cut_by = set()  # the kills that cut a call in flight

    def work(share):
        ch = grpc.insecure_channel(service.addr)
        stub = stubs.service_grpc.RewardServiceStub(ch)
        waiting = [(0.0, ev) for ev in share]
        deadline = time.monotonic() + 240
        while waiting and time.monotonic() < deadline:
            now = time.monotonic()
            ready = [ev for at, ev in waiting if at <= now][:per_batch]
            if not ready:
                time.sleep(0.05)
                continue
            ids = {id(ev) for ev in ready}
            waiting = [(at, ev) for at, ev in waiting if id(ev) not in ids]
            started_after = kills[0]
            try:
                res = stub.GrantBatch(stubs.service.GrantBatchRequest(events=ready), metadata=GRANT, timeout=20).results
            except grpc.RpcError as e:
                if e.code() not in IN_DOUBT_STATUSES:
                    with lock:
                        problems.append(f"call refused {e.code()}: {e.details()}")
                    return
                with lock:
                    stats["in_doubt_calls"] += 1
                    if kills[0] > started_after:
                        # It was sent before a kill and its answer never came.
                        cut_by.add(kills[0])
                waiting += [(time.monotonic() + 0.2, ev) for ev in ready]
                continue
            for r in res:
                ev = ready[r.index]
                o = name(stubs, r.outcome)
                if o in RESEND:
                    with lock:
                        stats["resends"] += 1
                    waiting.append((time.monotonic() + max(r.retry_after_ms, 50) / 1000, ev))
                elif o in ("GRANTED", "DUPLICATE"):
                    with lock:
                        final[ev.trade_no] = (o, r.downstream_ref)
                else:
                    with lock:
                        problems.append(f"{ev.trade_no}: {o} {r.error_code} {r.message}")
        if waiting:
            with lock:
                problems.append(f"{len(waiting)} requests not final after 240 s")
        ch.close()

    threads = [threading.Thread(target=work, args=(events[i::workers],)) for i in range(workers)]
    for t in threads:
        t.start()
    # Three kills in the middle of the traffic: at a fifth, at 45 % and at 70 % final.
    for frac in (0.2, 0.45, 0.7):
        while len(final) < frac * n and any(t.is_alive() for t in threads):
            time.sleep(0.005)
        kills[0] += 1
        service.kill9()
        time.sleep(0.3)
        service.start()
    for t in threads:
        t.join(timeout=300)
    assert not problems, problems[:10]
    assert len(final) == n
    # Each kill cut calls in flight (else this proved nothing about them).
    assert cut_by == {1, 2, 3}, (cut_by, stats)
    # Each credited once: the budget counts every reward once, however often it was sent.
    b = admin.GetBudget(stubs.admin.GetBudgetRequest(activity_id="cny", scene_id=scene), metadata=ADMIN, timeout=30)
    assert b.spent == sum(ev.amount for ev in events), (b, stats)
    # And every reward, sent again, is a DUPLICATE of the credit recorded.
    ch = grpc.insecure_channel(service.addr)
    stub = stubs.service_grpc.RewardServiceStub(ch)
    for i in range(0, n, 100):
        res = stub.GrantBatch(stubs.service.GrantBatchRequest(events=events[i : i + 100]), metadata=GRANT, timeout=60).results
        for r in res:
            assert name(stubs, r.outcome) == "DUPLICATE", r
            assert r.downstream_ref == final[r.trade_no][1], r
    ch.close()
    assert service.starts == 4
    # What each user must hold in the ledger: the harness checks it (one credit each).
    totals: dict[str, int] = {}
    for ev in events:
        totals[ev.user.user_id] = totals.get(ev.user.user_id, 0) + ev.amount
    (work_dir / "kill-ledger.json").write_text(json.dumps({"type": "cash", "balances": totals}))
    print(f"kill -9 x3: {stats['in_doubt_calls']} calls in doubt resent, {stats['resends']} results resent")


def test_token_vectors_open_as_the_spec_says():
    doc = json.loads(token_spec.VECTORS.read_text(encoding="utf-8"))
    assert token_spec.check(doc) == []


def test_tokens_the_sdk_sealed_open_in_python():
    doc = json.loads(Path(os.environ["CONFORMANCE_SDK_TOKENS"]).read_text(encoding="utf-8"))
    ring = {k["id"]: bytes.fromhex(k["key_hex"]) for k in doc["ring"]}
    assert len(doc["tokens"]) >= 20
    for t in doc["tokens"]:
        got = token_spec.open_token(ring, t["sealed"], t["user_id"], t["activity_id"])
        assert got == t["token"], t["sealed"]
        with pytest.raises(token_spec.Illegal) as e:
            token_spec.open_token(ring, t["sealed"], t["user_id"] + "x", t["activity_id"])
        assert e.value.kind == "forged"
        flipped = t["sealed"][:-3] + ("A" if t["sealed"][-3] != "A" else "B") + t["sealed"][-2:]
        with pytest.raises(token_spec.Illegal) as e:
            token_spec.open_token(ring, flipped, t["user_id"], t["activity_id"])
        assert e.value.kind == "forged"
