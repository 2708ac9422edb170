"""Python stubs of the reward API, generated from proto/proto/reward/v1/*.proto with
grpcio-tools at run time (nothing generated is checked in)."""

from __future__ import annotations

import importlib.resources
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def generate_stubs(out: Path) -> None:
    """Writes `reward/v1/*_pb2*.py` under `out` and puts `out` on the import path."""
    from grpc_tools import protoc

    out.mkdir(parents=True, exist_ok=True)
    root = REPO / "proto" / "proto"
    include = str(importlib.resources.files("grpc_tools") / "_proto")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*.proto"))
    args = ["protoc", f"-I{root}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}", *files]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed: {args}")
    if str(out) not in sys.path:
        sys.path.insert(0, str(out))
