"""The committed stubs are what the .proto files generate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def test_stubs_match_the_proto_files():
    out = subprocess.run(
        [sys.executable, str(HERE / "generate.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
