"""The conformance suite's fixtures: stubs generated from the .proto files at test
time, and the reward service binary under the suite's control (started, killed with
SIGKILL, started again).

Run by reward-service/tests/conformance.rs (ops/test, stack tier), which sets:
REWARD_SERVICE_BIN, REWARD_SERVICE_CONFIG and the credentials' variables (the
service reads them), CONFORMANCE_GRPC_ADDR (the service's gRPC address, fixed in its
config), CONFORMANCE_SDK_TOKENS (tokens the Rust SDK sealed), CONFORMANCE_WORK_DIR,
CONFORMANCE_TAG (unique per run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from stubs import generate_stubs

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


def need(var: str) -> str:
    value = os.environ.get(var)
    if not value:
        raise RuntimeError(f"{var} is not set: run the suite through reward-service/tests/conformance.rs (ops/test)")
    return value


class Service:
    """The reward service process: start, kill -9, start again."""

    def __init__(self, bin_path: str, config: str, addr: str, log: Path):
        self.bin, self.config, self.addr, self.log = bin_path, config, addr, log
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout: float = 60.0) -> None:
        self.starts += 1
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [self.bin, "--config", self.config],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=os.environ.copy(),
            )
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the service exited ({self.proc.returncode}); log: {self.log}")
            try:
                with grpc.insecure_channel(self.addr) as ch:
                    grpc.channel_ready_future(ch).result(timeout=1)
                return
            except grpc.FutureTimeoutError:
                time.sleep(0.2)
        raise RuntimeError(f"the service did not answer on {self.addr} within {timeout} s; log: {self.log}")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill9()


@pytest.fixture(scope="session")
def work_dir() -> Path:
    return Path(need("CONFORMANCE_WORK_DIR"))


@pytest.fixture(scope="session")
def stubs(work_dir: Path):
    generate_stubs(work_dir / "stubs")
    from reward.v1 import admin_pb2, admin_pb2_grpc, event_pb2, service_pb2, service_pb2_grpc

    class Stubs:
        pass

    s = Stubs()
    s.admin, s.admin_grpc, s.event, s.service, s.service_grpc = (
        admin_pb2,
        admin_pb2_grpc,
        event_pb2,
        service_pb2,
        service_pb2_grpc,
    )
    return s


@pytest.fixture(scope="session")
def service(work_dir: Path):
    svc = Service(
        need("REWARD_SERVICE_BIN"),
        need("REWARD_SERVICE_CONFIG"),
        need("CONFORMANCE_GRPC_ADDR"),
        work_dir / "service.log",
    )
    svc.start()
    yield svc
    svc.stop()


@pytest.fixture(scope="session")
def tag() -> str:
    return need("CONFORMANCE_TAG")
