#!/usr/bin/env bash
# The project's main job: `bench --compare`, after making sure the build
# tools the peer allocators need (cmake and a C++ compiler for snmalloc) are
# there. Arguments are passed to the bench, e.g. `--filter larson --isolate`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash devutils/install-deps.sh --system-only
# Loops 64-byte aligned: each allocator's copy of a workload's hot loop
# otherwise lands wherever the code before it leaves it, and its speed can
# follow (docs/decisions.md, "Benchmark loops aligned").
export RUSTFLAGS="${RUSTFLAGS:-} -C llvm-args=-align-loops=64"
exec cargo run --release -p bench -- --compare "$@"
