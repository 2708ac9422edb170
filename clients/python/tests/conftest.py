"""Shared by the tests: the scenarios every client runs (clients/conformance)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).resolve().parents[2] / "conformance" / "scenarios.json"


@pytest.fixture(scope="session")
def scenarios() -> dict:
    return json.loads(SCENARIOS.read_text())
