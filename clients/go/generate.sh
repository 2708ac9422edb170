#!/usr/bin/env bash
# clients/go/generate.sh [--check]: the Go client's stubs (internal/rewardv1) from the
# repository's .proto files.
#
#   generate.sh          rewrite the stubs
#   generate.sh --check  fail if the committed stubs differ from a fresh run
#
# The compiler is protoc as bundled by grpcio-tools (the Python client's pinned
# virtualenv: REWARD_CLIENTS_PYTHON, else python3 with grpcio-tools installed); the Go
# plugins are built at the versions pinned below into the reward-dispatch cache. Other
# versions write other bytes, and --check would fail for no change of the contract.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PROTOC_GEN_GO=v1.36.12
PROTOC_GEN_GO_GRPC=v1.6.2
files=(reward/v1/event.proto reward/v1/agent.proto)

python=${REWARD_CLIENTS_PYTHON:-python3}
if ! "$python" -c 'import grpc_tools.protoc' 2>/dev/null; then
  echo "generate.sh: $python has no grpcio-tools; set REWARD_CLIENTS_PYTHON to the Python client's virtualenv (ops/test makes it)" >&2
  exit 2
fi
bin=${REWARD_CACHE_DIR:-$HOME/.cache/reward-dispatch}/go-plugins/$PROTOC_GEN_GO-$PROTOC_GEN_GO_GRPC
if [[ ! -x $bin/protoc-gen-go || ! -x $bin/protoc-gen-go-grpc ]]; then
  mkdir -p "$bin"
  GOBIN=$bin GOFLAGS=-buildvcs=false go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO"
  GOBIN=$bin GOFLAGS=-buildvcs=false go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC"
fi
include=$("$python" -c 'import importlib.resources as r; print(r.files("grpc_tools") / "_proto")')

generate() { # generate OUT_DIR: writes OUT_DIR/internal/rewardv1
  local out=$1 maps=()
  for f in "${files[@]}"; do maps+=("M$f=rewardagent/internal/rewardv1"); done
  local go_opt grpc_opt
  go_opt="module=rewardagent,$(IFS=,; echo "${maps[*]}")"
  grpc_opt="module=rewardagent,require_unimplemented_servers=false,$(IFS=,; echo "${maps[*]}")"
  "$python" -m grpc_tools.protoc -I"$root/proto/proto" -I"$include" \
    --plugin=protoc-gen-go="$bin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
    --go_out="$out" --go_opt="$go_opt" --go-grpc_out="$out" --go-grpc_opt="$grpc_opt" "${files[@]}"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
generate "$tmp"
if [[ ${1:-} == --check ]]; then
  if ! diff -r "$tmp/internal/rewardv1" "$here/internal/rewardv1" >/dev/null; then
    echo "generate.sh: the stubs in clients/go/internal/rewardv1 are stale; run clients/go/generate.sh" >&2
    diff -r "$tmp/internal/rewardv1" "$here/internal/rewardv1" | head -20 >&2 || true
    exit 1
  fi
  echo "stubs in clients/go/internal/rewardv1 match the .proto files"
else
  rm -rf "$here/internal/rewardv1"
  mkdir -p "$here/internal"
  cp -r "$tmp/internal/rewardv1" "$here/internal/rewardv1"
  echo "wrote clients/go/internal/rewardv1"
fi
