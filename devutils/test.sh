#!/usr/bin/env bash
# The whole test suite, as the README documents it. Installs what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."

bash devutils/install-deps.sh

if ! cargo nextest --version >/dev/null 2>&1; then
    echo "== installing cargo-nextest"
    cargo install cargo-nextest --locked --no-default-features --features default-no-update
fi

echo "== building the release artifacts the tests use (libsmalloc.so, libsmalloc.a)"
cargo build --release -p smalloc-ffi

echo "== tests (cargo nextest: each test in its own process)"
cargo nextest run --workspace --no-fail-fast "$@"

echo "== core tests again with the portable (pthread key) thread-slab fallback"
RUSTFLAGS="--cfg smalloc_portable_tls" cargo nextest run -p smalloc \
    --target-dir target/portable-tls --no-fail-fast

echo "== loom: every interleaving of the real free-list code"
RUSTFLAGS="--cfg loom" cargo test -p smalloc --release --target-dir target/loom \
    --test loom_free_list
echo "== loom non-vacuity: without the push counter loom must find ABA"
RUSTFLAGS="--cfg loom --cfg smalloc_no_push_counter" cargo test -p smalloc --release \
    --target-dir target/loom-no-counter --test loom_free_list
