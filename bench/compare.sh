#!/usr/bin/env bash
# The project's main job: `bench --compare`, after making sure the build
# tools the peer allocators need (cmake and a C++ compiler for snmalloc) are
# there. Arguments are passed to the bench, e.g. `--filter larson --isolate`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash devutils/install-deps.sh --system-only
exec cargo run --release -p bench -- --compare "$@"
