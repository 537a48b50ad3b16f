#!/usr/bin/env bash
# Every verification tool beyond the test suite, one after the other (see
# docs/verification.md for what each covers and what it does not):
#
#   loom     every interleaving of the real free-list code, and the
#            non-vacuity build that must find the ABA bug
#   miri     the core crate's test suite under Miri (undefined behaviour)
#   tsan     the multi-threaded tests under ThreadSanitizer
#   fuzz     the four cargo-fuzz targets (GlobalAlloc, C entry points, the
#            secure mode's checks, four threads interleaved by the input)
#   coverage what the fuzz step's corpora cover of smalloc/src (llvm-cov)
#   stress   the stress example with 2x and 32x as many threads as cores
#
# Usage: devutils/verify.sh [--long] [STEP...]
#   default budgets: fuzz 60 s per target, stress 60 s per thread count
#   --long:          fuzz 10,000,000 executions per target (at most 3600 s
#                    each), stress 600 s per thread count
#   STEP...:         run only these steps (default: all, in the order above)
# Budgets can also be set directly: FUZZ_SECONDS, FUZZ_RUNS (-1: no limit),
# STRESS_SECONDS, STRESS_THREADS (the thread counts, one run each).
# Build products go to $VERIFY_TARGET_DIR (default target/verify).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

long=0
steps=()
for a in "$@"; do
    case "$a" in
    --long) long=1 ;;
    loom | miri | tsan | fuzz | coverage | stress) steps+=("$a") ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed '$d'
        exit 2
        ;;
    esac
done
[ ${#steps[@]} -eq 0 ] && steps=(loom miri tsan fuzz coverage stress)
if [ $long -eq 1 ]; then
    : "${FUZZ_SECONDS:=3600}" "${FUZZ_RUNS:=10000000}" "${STRESS_SECONDS:=600}"
else
    : "${FUZZ_SECONDS:=60}" "${FUZZ_RUNS:=-1}" "${STRESS_SECONDS:=60}"
fi
T=${VERIFY_TARGET_DIR:-$root/target/verify}
case "$T" in /*) ;; *) T=$root/$T ;; esac

# Miri: the flags every Miri run of this repository uses (docs/verification.md
# explains each).
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-permissive-provenance -Zmiri-disable-weak-memory-emulation}"

bash devutils/install-verify-deps.sh

run_loom() {
    echo "== loom: every interleaving of the real free-list and ownership code"
    RUSTFLAGS="--cfg loom" cargo test -p smalloc --release --target-dir "$T/loom" \
        --test loom_free_list
    echo "== loom non-vacuity: without the push counter loom must find ABA"
    RUSTFLAGS="--cfg loom --cfg smalloc_no_push_counter" cargo test -p smalloc --release \
        --target-dir "$T/loom-no-counter" --test loom_free_list
    echo "== loom non-vacuity: if every claim succeeded, loom must find two owners on one private list"
    RUSTFLAGS="--cfg loom --cfg smalloc_no_ownership_check" cargo test -p smalloc --release \
        --target-dir "$T/loom-no-owner" --test loom_free_list
}

run_miri() {
    echo "== miri: the core crate's tests (MIRIFLAGS=$MIRIFLAGS)"
    cargo +nightly miri nextest run -p smalloc --target-dir "$T/miri" --no-fail-fast \
        -E 'not binary(threads)'
    # threads.rs pops slots of one free list from many threads: Miri's race
    # detector then reports the by-design stale link read (the report
    # devutils/tsan.supp suppresses for TSan) and Miri has no suppressions.
    # These tests run with the detector off; every other check stays on.
    echo "== miri: threads.rs, without the data race detector"
    MIRIFLAGS="$MIRIFLAGS -Zmiri-disable-data-race-detector" \
        cargo +nightly miri nextest run -p smalloc --target-dir "$T/miri" --no-fail-fast \
        -E 'binary(threads)'
}

run_tsan() {
    echo "== ThreadSanitizer: the multi-threaded tests"
    # --cfg smalloc_tsan: a 2 TiB reservation, which TSan's memory layout
    # has room for (smalloc/src/layout.rs). Under nextest, so each test
    # starts in a fresh process (the ownership tests rely on it);
    # CARGO_UNSTABLE_BUILD_STD is -Zbuild-std. The purge's fork test is left
    # out: TSan does not support threads started after a multi-threaded fork.
    RUSTFLAGS="-Zsanitizer=thread --cfg smalloc_tsan" \
        TSAN_OPTIONS="halt_on_error=1 suppressions=$root/devutils/tsan.supp" \
        CARGO_UNSTABLE_BUILD_STD=std \
        cargo +nightly nextest run --target x86_64-unknown-linux-gnu -p smalloc \
        --target-dir "$T/tsan" --no-fail-fast \
        -E 'binary(threads) | binary(first_alloc_race) | binary(shadow_model) | binary(ownership) | binary(held) | binary(guest) | binary(cross_slab_reuse) | (binary(purge) & !test(fork))'
}

# The fuzz targets, and the cargo-fuzz options of each (docs/verification.md):
# -a, the core's debug assertions; -s none, no ASan (smalloc's blocks are
# its own mappings, which ASan does not watch; it would halve the speed).
fuzz_targets=(global_alloc c_api secure threads)
fuzz_flags() {
    case "$1" in
    secure) echo "-a -s none --features secure" ;;
    *) echo "-a -s none" ;;
    esac
}

run_fuzz() {
    for target in "${fuzz_targets[@]}"; do
        echo "== fuzz $target for ${FUZZ_SECONDS}s or $FUZZ_RUNS executions (-1: no limit)"
        # New inputs go to a scratch corpus; the committed seeds are read only.
        mkdir -p "$T/fuzz-corpus/$target"
        # shellcheck disable=SC2046
        (cd fuzz && CARGO_TARGET_DIR="$T/fuzz" cargo +nightly fuzz run $(fuzz_flags "$target") \
            "$target" "$T/fuzz-corpus/$target" "seeds/$target" -- \
            -max_total_time="$FUZZ_SECONDS" -runs="$FUZZ_RUNS" -rss_limit_mb=4096 -max_len=1024 \
            -print_final_stats=1 -artifact_prefix="$T/fuzz-artifacts-$target-")
    done
}

run_coverage() {
    echo "== coverage of smalloc/src by each target's corpus (scratch corpus and seeds)"
    llvm_cov="$(rustc +nightly --print sysroot)/lib/rustlib/x86_64-unknown-linux-gnu/bin/llvm-cov"
    for target in "${fuzz_targets[@]}"; do
        mkdir -p "$T/fuzz-corpus/$target"
        # cargo fuzz coverage reads one corpus directory: merge both.
        corpus="$T/fuzz-coverage-corpus/$target"
        rm -rf "$corpus" && mkdir -p "$corpus"
        cp "$T/fuzz-corpus/$target"/. "fuzz/seeds/$target"/. -t "$corpus" -r
        # shellcheck disable=SC2046
        (cd fuzz && cargo +nightly fuzz coverage --target-dir "$T/fuzz-cov" \
            $(fuzz_flags "$target" | sed 's/-s none//') "$target" "$corpus" \
            >"$T/fuzz-coverage-$target.log" 2>&1) ||
            { tail -20 "$T/fuzz-coverage-$target.log"; exit 1; }
        echo "== coverage: $target ($(find "$corpus" -type f | wc -l) inputs)"
        "$llvm_cov" report \
            "$T/fuzz-cov/x86_64-unknown-linux-gnu/release/$target" \
            -instr-profile="fuzz/coverage/$target/coverage.profdata" \
            -ignore-filename-regex='/(\.cargo|\.rustup|rustc|fuzz|devutils|smalloc-ffi)/' |
            sed "s|$root/||"
    done
}

run_stress() {
    cargo build --release -p smalloc --example stress --target-dir "$T/stress"
    cores=$(nproc)
    # 32x: on 2 cores, 64 threads: four for each slab.
    for threads in ${STRESS_THREADS:-$((2 * cores)) $((32 * cores))}; do
        echo "== stress: $threads threads for ${STRESS_SECONDS}s"
        "$T/stress/release/examples/stress" --threads "$threads" \
            --seconds "$STRESS_SECONDS" --seed "${STRESS_SEED:-1}"
    done
}

for s in "${steps[@]}"; do
    "run_$s"
done
echo "== verify: ${steps[*]}: all passed"
