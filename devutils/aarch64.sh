#!/usr/bin/env bash
# aarch64 Linux under emulation (docs/platforms.md): cross-builds the core
# crate's tests, libsmalloc.so/.a and the C test programs for
# aarch64-unknown-linux-gnu, and runs them under qemu-user. Called by
# devutils/test.sh; runs on its own too. Needs what
# `devutils/install-deps.sh` installs (the cross compilers, qemu-user) and
# the Rust target, which it adds.
#
# Every emulated run maps the layout on demand (SMALLOC_RESERVE=0): qemu-user
# keeps state for every page of a guest mapping, so an 8 TiB reservation
# stalls it. The formulas and the layout are the default build's.
set -euo pipefail
cd "$(dirname "$0")/.."

T=aarch64-unknown-linux-gnu
SYSROOT=/usr/aarch64-linux-gnu
if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null; then
    echo "== aarch64: qemu-aarch64 or aarch64-linux-gnu-gcc missing: run devutils/install-deps.sh" >&2
    exit 1
fi
rustup target list --installed | grep -qx "$T" || rustup target add "$T"

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L $SYSROOT"
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
# What the tests use to run and build target programs (devutils/src/lib.rs).
export SMALLOC_TEST_RUNNER="qemu-aarch64 -L $SYSROOT"
export SMALLOC_TEST_CC=aarch64-linux-gnu-gcc
export SMALLOC_TEST_CXX=aarch64-linux-gnu-g++
export SMALLOC_TEST_TOOL_PREFIX=aarch64-linux-gnu-
export SMALLOC_RESERVE=0
DIR=target/aarch64

echo "== aarch64: the core's tests under qemu-aarch64 (layout mapped on demand)"
# Left out, as in test.sh's native on-demand run: the tests of slots above
# 32 MiB (failover, release, every_class), corrupt_link, and limits,
# limited_workload and huge_pages (geometries of their own, and the 8 TiB
# reservation).
# Left out for qemu-user: core_dump (qemu writes its own core files, not
# the guest's), the resident-set bounds of thread_churn and zeroed (the
# resident set is the emulator's, translated code included), and fork in a
# process with threads (ownership's fork child, purge's fork_while_sweeps_run:
# qemu-user's child of a multi-threaded process may not start threads).
CORE_FILTER='not (
    binary(limits) | binary(limited_workload) | binary(huge_pages) | binary(failover) |
    binary(release) |
    binary(every_class) | binary(corrupt_link) | binary(core_dump) |
    test(rss_plateaus_under_thread_churn) | test(fresh_gib_alloc_zeroed_does_not_raise_rss) |
    test(a_fork_child_can_claim_the_slabs_of_threads_it_does_not_have) |
    test(fork_while_sweeps_run))'
cargo nextest run -p smalloc --target "$T" --target-dir "$DIR" --no-fail-fast -E "$CORE_FILTER"

echo "== aarch64: the core's tests with the heap profiler (its frame walk on aarch64)"
RUSTFLAGS="-C force-frame-pointers=yes" cargo nextest run -p smalloc --features profile \
    --target "$T" --target-dir "$DIR-prof" --no-fail-fast -E "$CORE_FILTER"

echo "== aarch64: the C library's tests under qemu-aarch64 (C programs cross-built, run preloaded)"
cargo build --release -p smalloc-ffi --target "$T" --target-dir "$DIR"
# Left out: the tests that run the host's programs under LD_PRELOAD (python,
# sqlite, sort: introspect, real_programs, profile's
# the_default_library_has_no_profiler), header (host tooling only),
# reservation (core dumps), the fork programs (fork with threads, above),
# and the one-thread purge programs (they count the process's threads,
# which include the emulator's own).
cargo nextest run -p smalloc-ffi --target "$T" --target-dir "$DIR" --no-fail-fast -E 'not (
    binary(introspect) | binary(real_programs) | binary(header) | binary(reservation) |
    test(the_default_library_has_no_profiler) | test(fork_while_other_threads_allocate) |
    test(fork_with_a_sweep_every_millisecond) | test(a_program_with_one_thread_))'

echo "== aarch64: a 39-bit address space (qemu-aarch64 -R 512 GiB) with the va39 layout"
# The default layout has no room there (a program aborts at its first
# allocation); the va39 feature's 128 GiB one does. hellomalloc reserves it
# whole; the core's tests map it on demand (the unit tests of the default
# geometry's constants skip themselves). Not the four-thread shadow model:
# qemu's mmap under -R returns address 0 once its space is fragmented
# enough, which no kernel does.
VA39_RUNNER="qemu-aarch64 -R 0x8000000000 -L $SYSROOT"
cargo build --release -p hellomalloc --features smalloc/va39 --target "$T" --target-dir "$DIR-va39"
SMALLOC_RESERVE=1 $VA39_RUNNER "$DIR-va39/$T/release/hellomalloc"
CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$VA39_RUNNER" SMALLOC_TEST_RUNNER="$VA39_RUNNER" \
    cargo nextest run -p smalloc --features va39 --target "$T" --target-dir "$DIR-va39" \
    --no-fail-fast -E "($CORE_FILTER) & not test(random_sequences_on_four_threads)"

echo "== aarch64: the stress example for ${AARCH64_STRESS_SECONDS:-20}s on 4 threads"
cargo build --release -p smalloc --example stress --target "$T" --target-dir "$DIR"
qemu-aarch64 -L "$SYSROOT" "$DIR/$T/release/examples/stress" --threads 4 \
    --seconds "${AARCH64_STRESS_SECONDS:-20}"
