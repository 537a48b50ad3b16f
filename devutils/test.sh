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

echo "== the A/B benchmarks (bench/ab.sh's tango target): one of each kind, against itself"
rm -rf target/ab-smoke && mkdir -p target/ab-smoke
# Exit status 1 only means tango saw a significant difference (noise here).
# The report reads the dumps (--dump, one CSV per benchmark; an absolute path:
# cargo bench runs the binary in bench/).
cargo bench -q -p bench --no-default-features --bench tango -- --color never compare -s 2 \
    -f '{rows/tiny@1,json/log/serde_json,preload/cache-thrash@2,burst/1-64B}' \
    --dump "$PWD/target/ab-smoke/smoke-ba-1" \
    >target/ab-smoke/smoke-ba-1.txt 2>target/ab-smoke/stderr.txt || true
python3 bench/ab_report.py target/ab-smoke smoke 1 self b:a | tee target/ab-smoke/report.txt
grep -q "geometric mean B/A over 4 benchmarks" target/ab-smoke/report.txt ||
    { cat target/ab-smoke/stderr.txt; exit 1; }

echo "== core tests again with the regions mapped on demand (SMALLOC_RESERVE=0: no reservation)"
# Not the tests of slots above 32 MiB (failover of 1 GiB slots, the
# release size, every class up to 2 GiB): on demand, such blocks are
# mappings; nor corrupt_link, whose corrupted link names memory never
# mapped on demand (the program stops there with SIGSEGV, as
# docs/design.md says); limits, limited_workload and huge_pages check
# geometries of their own.
SMALLOC_RESERVE=0 cargo nextest run -p smalloc --no-fail-fast -E 'not (binary(limits) |
    binary(limited_workload) | binary(huge_pages) | binary(failover) | binary(release) |
    binary(every_class) | binary(corrupt_link))'

echo "== core tests again with the portable (pthread key) thread-slab fallback"
RUSTFLAGS="--cfg smalloc_portable_tls" cargo nextest run -p smalloc \
    --target-dir target/portable-tls --no-fail-fast

echo "== the event counters (the counters feature): core tests, the C library's report, bench's use"
cargo nextest run -p smalloc --features counters --target-dir target/counters --no-fail-fast
cargo build --release -p smalloc-ffi --features counters --target-dir target/counters
cargo nextest run -p smalloc-ffi --features counters --target-dir target/counters \
    --no-fail-fast -E 'binary(introspect)'
cargo build -p bench --no-default-features --features smalloc-counters --target-dir target/counters

echo "== heap profiling (the profile feature): the core's whole suite with its reserved slab, and the profile tests"
# Frame pointers: the tests of frame-pointer stacks name their sites.
RUSTFLAGS="-C force-frame-pointers=yes" cargo nextest run -p smalloc --features profile \
    --target-dir target/profile --no-fail-fast
echo "== the profiling C library (frame pointers on, as docs/profiling.md builds it) under LD_PRELOAD"
RUSTFLAGS="-C force-frame-pointers=yes" cargo build --release -p smalloc-ffi --features profile \
    --target-dir target/prof
RUSTFLAGS="-C force-frame-pointers=yes" cargo nextest run -p smalloc-ffi --features profile \
    --target-dir target/prof --no-fail-fast -E 'binary(profile)'

echo "== the secure mode (the secure feature): the core's whole suite with checked links, and the C library under LD_PRELOAD"
cargo nextest run -p smalloc --features secure --target-dir target/secure --no-fail-fast
cargo build --release -p smalloc-ffi --features secure --target-dir target/secure
cargo nextest run -p smalloc-ffi --features secure --target-dir target/secure --no-fail-fast \
    -E 'binary(secure)'

echo "== valgrind (the valgrind feature): memcheck sees smalloc's blocks, from Rust and from C (preloaded, static)"
cargo nextest run -p smalloc --features valgrind --target-dir target/valgrind --no-fail-fast \
    -E 'binary(valgrind)'
if command -v valgrind >/dev/null; then
    echo "== the core's tests that do not count on reuse order, under memcheck (any error fails them)"
    CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="valgrind -q --redzone-size=0 --error-exitcode=99" \
        cargo nextest run -p smalloc --features valgrind --target-dir target/valgrind --no-fail-fast \
        -E 'binary(shadow_model) | binary(threads) | binary(first_alloc_race) | binary(thread_churn) | binary(big) | binary(vec_growth)'
else
    echo "== SKIPPED: the core's tests under memcheck: valgrind is not installed"
fi
cargo build --release -p smalloc-ffi --features valgrind --target-dir target/valgrind
cargo nextest run -p smalloc-ffi --features valgrind --target-dir target/valgrind --no-fail-fast \
    -E 'binary(valgrind)'
echo "== the same with the regions mapped on demand (SMALLOC_RESERVE=0): memcheck's view of new mappings"
SMALLOC_RESERVE=0 cargo nextest run -p smalloc-ffi --features valgrind --target-dir target/valgrind \
    --no-fail-fast -E 'binary(valgrind)'

# aarch64 Linux under qemu-user: the core's tests, the C library's tests
# and the stress example, cross-built (docs/platforms.md says what runs).
bash devutils/aarch64.sh

echo "== loom: every interleaving of the real free-list and ownership code"
RUSTFLAGS="--cfg loom" cargo test -p smalloc --release --target-dir target/loom \
    --test loom_free_list
echo "== loom non-vacuity: without the push counter loom must find ABA"
RUSTFLAGS="--cfg loom --cfg smalloc_no_push_counter" cargo test -p smalloc --release \
    --target-dir target/loom-no-counter --test loom_free_list
echo "== loom non-vacuity: if every claim succeeded, loom must find two owners on one private list"
RUSTFLAGS="--cfg loom --cfg smalloc_no_ownership_check" cargo test -p smalloc --release \
    --target-dir target/loom-no-owner --test loom_free_list
echo "== loom non-vacuity: a blind chain push must lose a slot, a blind reset or span take hand one out twice, a blind unregister let a nudge write freed words, a blind guest-cell emptying hand one out twice or lose one, a blind hint clear hide a freed large slot"
RUSTFLAGS="--cfg loom --cfg smalloc_blind_chain_push --cfg smalloc_blind_reset --cfg smalloc_blind_span_take --cfg smalloc_blind_unregister --cfg smalloc_blind_guest_empty --cfg smalloc_blind_hint_clear" cargo test -p smalloc \
    --release --target-dir target/loom-blind --test loom_free_list

# The fast parts of devutils/verify.sh (docs/verification.md): a Miri subset
# and a short fuzz run. Nightly, Miri and cargo-fuzz are installed on first
# use (cargo-fuzz takes a few minutes to build, once).
# A machine that cannot get the nightly tools (no rustup download server)
# skips these two steps with a loud line; their failures still fail.
if bash devutils/install-verify-deps.sh; then
    echo "== miri: the core's unit tests and the single-threaded integration tests"
    MIRIFLAGS="-Zmiri-permissive-provenance -Zmiri-disable-weak-memory-emulation" \
        cargo +nightly miri nextest run -p smalloc --target-dir target/miri --no-fail-fast \
        -E 'kind(lib) or binary(failover) or binary(first_alloc_race) or binary(growers) or binary(zeroed) or binary(cross_slab_reuse) or binary(ownership)'
    # Four targets, 10 s each (as devutils/verify.sh runs them, shorter).
    for target in global_alloc c_api secure threads; do
        echo "== fuzz $target for ${FUZZ_SECONDS:-10}s (the committed seeds, then new inputs)"
        mkdir -p "target/fuzz-corpus/$target"
        features=""
        [ "$target" = secure ] && features="--features secure"
        # shellcheck disable=SC2086
        (cd fuzz && CARGO_TARGET_DIR=../target/fuzz cargo +nightly fuzz run -a -s none $features \
            "$target" "../target/fuzz-corpus/$target" "seeds/$target" -- \
            -max_total_time="${FUZZ_SECONDS:-10}" -rss_limit_mb=4096 -max_len=1024 \
            -artifact_prefix="../target/fuzz-artifacts-$target-")
    done
else
    echo "== SKIPPED: Miri and fuzzing: the nightly toolchain, miri or cargo-fuzz could not be installed (see above)"
fi
