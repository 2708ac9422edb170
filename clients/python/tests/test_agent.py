"""The shared scenarios (clients/conformance/scenarios.json) against a real agent.

Run by the stack tier's harness (agent/tests/clients.rs, through ops/test), which
starts the agent and sets the variables below; without them every test here fails
(never skips). What each variable means: clients/conformance/README.md.
"""

from __future__ import annotations

import copy
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from reward_agent import AgentClient, HeldBy, Issued, Reward, RewardError, User

LANG = "python"


def need(var: str) -> str:
    value = os.environ.get(var)
    if not value:
        raise RuntimeError(
            f"{var} is not set: run the client tests through ops/test (agent/tests/clients.rs)"
        )
    return value


@pytest.fixture(scope="module")
def agent():
    with AgentClient.unix(
        need("REWARD_AGENT_SOCKET"), timeout=float(os.environ.get("CONFORMANCE_TIMEOUT_S", "5"))
    ) as c:
        yield c


@pytest.fixture(scope="module")
def tag() -> str:
    return f"{need('CONFORMANCE_TAG')}-{LANG}"


@pytest.fixture(scope="module")
def sent_log():
    out = Path(need("CONFORMANCE_OUT"))
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{LANG}.sent.tsv", "a") as f:
        yield f


def expand(v):
    if isinstance(v, dict) and set(v) == {"repeat", "count"}:
        return v["repeat"] * v["count"]
    if isinstance(v, dict):
        return {expand(k): expand(x) for k, x in v.items()}
    return v


def reward(scenarios: dict, tag: str, user: str, set_: dict | None = None) -> Reward:
    doc = copy.deepcopy(scenarios["base"])
    for k, v in (set_ or {}).items():
        doc[k] = expand(v)
    fill = lambda s: s.replace("{tag}", tag).replace("{user}", user)  # noqa: E731
    u = doc["user"]
    who = None if u is None else User(fill(u.get("user_id", "")), u.get("device_id", ""), u.get("app_id", ""))
    return Reward(
        trade_no=fill(doc["trade_no"]),
        user=who,
        activity_id=fill(doc["activity_id"]),
        scene_id=doc["scene_id"],
        reward_type=doc["reward_type"],
        amount=doc["amount"],
        description=doc["description"],
        extension=doc["extension"],
    )


def record(log, r: Reward, issued: Issued) -> None:
    """The books' sent line (tools/src/books/sent.rs) and the token, for the harness."""
    stored = int(issued.held_by == HeldBy.STORE)
    log.write(
        f"{r.trade_no}\t{r.user.user_id}\t{r.activity_id}\t{r.scene_id}\t{r.reward_type}\t{r.amount}"
        f"\t{int(time.time() * 1000)}\t{stored}\t0\t{issued.token}\n"
    )
    log.flush()


def test_one_reward_is_issued_with_a_token(agent, scenarios, tag, sent_log):
    r = reward(scenarios, tag, "u-one")
    issued = agent.send(r)
    assert issued.trade_no == r.trade_no
    assert issued.token and issued.held_by in (HeldBy.STORE, HeldBy.QUEUE, HeldBy.SPOOL)
    record(sent_log, r, issued)


def test_a_batch_answers_each_reward_in_order(agent, scenarios, tag, sent_log):
    n = scenarios["batch"]["size"]
    rewards = [reward(scenarios, tag, f"u-batch-{i}") for i in range(n)]
    answers = agent.send_batch(rewards)
    assert len(answers) == n
    for r, a in zip(rewards, answers):
        assert isinstance(a, Issued), a
        assert a.trade_no == r.trade_no
        record(sent_log, r, a)


def test_a_repeated_trade_number_is_answered_again_and_credited_once(agent, scenarios, tag, sent_log):
    r = reward(scenarios, tag, "u-repeat")
    first = agent.send(r)
    again = agent.send(r)
    assert (first.trade_no, again.trade_no) == (r.trade_no, r.trade_no)
    record(sent_log, r, first)


def test_every_bad_input_is_refused_with_its_code_and_field(agent, scenarios, tag):
    assert scenarios["bad_inputs"]
    for case in scenarios["bad_inputs"]:
        r = reward(scenarios, tag, "u-bad", case["set"])
        with pytest.raises(RewardError) as caught:
            agent.send(r)
        e = caught.value
        assert (e.code, e.field) == (case["code"], case["field"]), f"{case['name']}: {e}"
        assert not e.resend, case["name"]


def test_a_batch_over_the_limit_is_refused_whole(agent, scenarios, tag):
    n = scenarios["over_batch"]["size"]
    rewards = [reward(scenarios, tag, f"u-over-{i}") for i in range(n)]
    answers = agent.send_batch(rewards)
    assert all(isinstance(a, RewardError) and a.code == "INVALID_ARGUMENT" and not a.resend for a in answers)


def test_an_agent_killed_mid_batch_loses_no_answered_reward(scenarios, tag, sent_log, tmp_path):
    """SIGKILL mid-batch, restart, resend every unanswered reward with its trade number:
    every answered one is recorded for the harness, which checks each is credited once."""
    kill = scenarios["kill"]
    socket = tmp_path / "kill.sock"
    env = dict(
        os.environ,
        REWARD_AGENT__LISTEN__SOCKET=str(socket),
        REWARD_AGENT__ADMIN__ADDR="127.0.0.1:0",
        REWARD_SDK__SPOOL__DIR=str(tmp_path / "spool"),
    )
    log = open(tmp_path / "agent.log", "ab")

    started: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        p = subprocess.Popen(
            [need("REWARD_AGENT_BIN"), "--config", need("REWARD_AGENT_CONFIG")],
            env=env,
            stdout=log,
            stderr=log,
        )
        started.append(p)
        until = time.monotonic() + 60
        while time.monotonic() < until:
            if p.poll() is not None:
                raise RuntimeError(f"the agent exited with {p.returncode}; log {tmp_path / 'agent.log'}")
            if socket.exists():
                with AgentClient.unix(str(socket), timeout=1.0) as c:
                    if c.serving():
                        return p
            time.sleep(0.05)
        raise RuntimeError("the agent did not serve within 60 s")

    rewards = [reward(scenarios, tag, f"u-kill-{i}") for i in range(kill["rewards"])]
    size, cut_at = kill["batch"], kill["kill_after_batches"]
    batches = [rewards[i : i + size] for i in range(0, len(rewards), size)]
    answered: dict[str, Issued] = {}
    unanswered: list[Reward] = []
    for_good: list[str] = []
    try:
        proc = start()
        client = AgentClient.unix(str(socket), timeout=30.0)

        def settle(batch: list[Reward], answers) -> None:
            # In a thread too: failures are collected, never raised where nobody sees them.
            for r, a in zip(batch, answers):
                if isinstance(a, Issued):
                    answered[r.trade_no] = a
                elif a.resend:
                    unanswered.append(r)
                else:
                    for_good.append(f"{r.trade_no}: {a}")

        # The batches before the kill, one after another, as a service would send them.
        for batch in batches[:cut_at]:
            settle(batch, client.send_batch(batch))
        # The rest from several senders at once; the agent is killed once one of them was
        # answered, so the kill lands while the agent is taking batches, and the batches
        # not sent by then find it gone.
        todo = queue.SimpleQueue()
        for b in batches[cut_at:]:
            todo.put(b)
        first_answer = threading.Event()

        def sender() -> None:
            while True:
                try:
                    b = todo.get_nowait()
                except queue.Empty:
                    return
                settle(b, client.send_batch(b))
                first_answer.set()

        senders = [threading.Thread(target=sender) for _ in range(kill["senders"])]
        for t in senders:
            t.start()
        assert first_answer.wait(timeout=120), "no batch answered within 120 s"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for t in senders:
            t.join(timeout=120)
            assert not t.is_alive(), "a batch call did not return within 120 s of the kill"
        client.close()
        assert not for_good, f"refused for good while the agent was up or killed: {for_good[:5]}"
        assert unanswered, "the kill cut no call: the scenario proved nothing"
        client.close()
        proc = start()
        try:
            with AgentClient.unix(str(socket), timeout=10.0) as c:
                for r in unanswered:
                    answered[r.trade_no] = c.send_settled(r, within=30.0)
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, f"the agent did not stop cleanly; log {tmp_path / 'agent.log'}"
        assert len(answered) == len(rewards)
        by_trade = {r.trade_no: r for r in rewards}
        for trade, issued in answered.items():
            record(sent_log, by_trade[trade], issued)
    finally:
        # A failed test leaves no agent behind.
        for p in started:
            if p.poll() is None:
                p.kill()
