"""Generates the package's stubs (src/reward_agent/_gen) from the repository's
.proto files with grpcio-tools, with their imports made package-relative, so the
package needs no generator at run time.

    python generate.py          # rewrite the stubs
    python generate.py --check  # fail if the committed stubs differ from a fresh run

The generator's version is pinned in pyproject.toml's `dev` extra: another version
writes other bytes, and the check would fail for no change of the contract.
"""

from __future__ import annotations

import filecmp
import importlib.resources
import re
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "proto" / "proto"
FILES = ["reward/v1/event.proto", "reward/v1/agent.proto"]
OUT = HERE / "src" / "reward_agent" / "_gen"


def generate(out: Path) -> None:
    from grpc_tools import protoc

    include = str(importlib.resources.files("grpc_tools") / "_proto")
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        *FILES,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed: {' '.join(args)}")
    for py in out.rglob("*.py"):
        text = py.read_text()
        text = re.sub(r"^from reward\.v1 import", "from reward_agent._gen.reward.v1 import", text, flags=re.M)
        py.write_text(text)
    for d in [out, *[p for p in out.rglob("*") if p.is_dir()]]:
        (d / "__init__.py").touch()


def same_tree(a: Path, b: Path) -> list[str]:
    diffs = []
    names = {p.relative_to(a) for p in a.rglob("*.py")} | {p.relative_to(b) for p in b.rglob("*.py")}
    for name in sorted(names):
        if (
            not (a / name).exists()
            or not (b / name).exists()
            or not filecmp.cmp(a / name, b / name, shallow=False)
        ):
            diffs.append(str(name))
    return diffs


def main() -> None:
    if "--check" in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = Path(tmp)
            generate(fresh)
            diffs = same_tree(fresh, OUT)
        if diffs:
            raise SystemExit(f"stale stubs in {OUT}: {', '.join(diffs)}; run `python generate.py`")
        print(f"stubs in {OUT} match the .proto files")
        return
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    generate(OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
