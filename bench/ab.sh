#!/usr/bin/env bash
# The A/B path: smalloc at an earlier revision REV (A) against the working
# tree (B) on every workload (bench --compare's rows, the everyday Rust
# patterns, simd-json's parse of the corpus, the LD_PRELOAD programs),
# paired by tango-bench (benches/tango: both builds run side by side in
# child processes, sample for sample). Builds each side's tango binary and
# libsmalloc.so, runs `B compare A` RUNS times, and prints (bench/ab_report.py,
# from tango's CSV dumps of every sample) per benchmark the median over runs
# of A's and B's time per iteration, the median ratio B/A (per run: the mean
# of B's samples over the mean of A's = 1 + tango's change; above 1.00: B
# slower) and the quartiles of the per-run ratios, then their geometric mean.
#
#   bash bench/ab.sh REV [RUNS] [tango compare options, e.g. -t 1 -f 'rows/*']
#
# Default RUNS 5 and `-t 0.5` (seconds per benchmark per run). REV needs the
# benchmarks too (tango pairs them by name; older commits have fewer).
# Environment: OUT (default target/ab) holds the worktree, the builds and the
# raw outputs: STAMP-PAIR-RUN/ tango's CSV dumps, STAMP-PAIR-RUN.txt its text
# (remove the worktree with `git worktree remove` when done).
# CONTROL=1 also runs A against itself each round (A'/A: how far this
# machine's noise alone moves each benchmark). A_FEATURES / B_FEATURES are
# cargo options for one side's tango build, e.g. A_FEATURES="--features
# global-mimalloc" makes A mimalloc (the preload programs then run on B only).
# A_SO_FEATURES / B_SO_FEATURES are the same for the side's libsmalloc.so
# (smalloc-ffi): B_FEATURES="--features smalloc-counters"
# B_SO_FEATURES="--features counters" measures the event counters' cost.
set -euo pipefail
rev="${1:?usage: bench/ab.sh REV [RUNS] [tango compare options...]}"
runs="${2:-5}"
shift $(($# >= 2 ? 2 : 1))
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/target/ab}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
mkdir -p "$out"
# Loops 64-byte aligned on both sides: a workload's own hot loop otherwise
# lands wherever the inlined allocator code before it leaves it, and its
# speed can follow (docs/decisions.md, "Benchmark loops aligned").
export RUSTFLAGS="${RUSTFLAGS:-} -C llvm-args=-align-loops=64"
sha="$(git -C "$root" rev-parse --short "$rev")"
wt="$out/worktree-$sha"
if [ ! -d "$wt" ]; then
    git -C "$root" worktree add --detach "$wt" "$sha" >&2
fi

# export SIDE DIR [cargo options]: builds DIR's libsmalloc.so and tango
# binary into $out/SIDE.
export_side() {
    local side="$1" dir="$2" so_features="$3" target="$out/target-$1" exe
    shift 3
    echo "== building $side from $dir $* (libsmalloc.so: $so_features)" >&2
    # shellcheck disable=SC2086 # the options are words
    (cd "$dir" && CARGO_TARGET_DIR="$target" cargo build --release --quiet -p smalloc-ffi \
        $so_features)
    exe="$(cd "$dir" && CARGO_TARGET_DIR="$target" cargo bench --quiet -p bench --bench tango \
        --no-run --message-format=json "$@" | grep '"name":"tango"' |
        grep -o '"executable":"[^"]*"' | tail -n 1 | cut -d'"' -f4)"
    [ -x "$exe" ] || { echo "ab.sh: no tango executable for $side" >&2; exit 1; }
    mkdir -p "$out/$side"
    cp "$exe" "$out/$side/tango"
    cp "$target/release/libsmalloc.so" "$out/$side/libsmalloc.so"
}
# shellcheck disable=SC2086 # the options are words
export_side a "$wt" "${A_SO_FEATURES:-}" ${A_FEATURES:-}
# shellcheck disable=SC2086
export_side b "$root" "${B_SO_FEATURES:-}" ${B_FEATURES:-}

# Both sides parse the same documents.
if [ -z "${SMALLOC_JSON_CORPUS:-}" ] && [ -d "$root/../shared/json-corpus" ]; then
    export SMALLOC_JSON_CORPUS="$(cd "$root/../shared/json-corpus" && pwd)"
fi
opts=("$@")
case " $* " in *" -t "* | *" -s "* | *" --time"* | *" --samples"*) ;; *) opts+=(-t 0.5) ;; esac
pairs="b:a"
[ "${CONTROL:-0}" = 1 ] && pairs="b:a a:a"
stamp="$(date +%Y%m%d-%H%M%S)"
# The report reads tango's CSV dumps (one directory per run and pair, a file
# per benchmark, named after it with / as -); this list gives back the names.
"$out/b/tango" list >"$out/$stamp-names.txt"
for ((i = 1; i <= runs; i++)); do
    for pair in $pairs; do
        run="$out/$stamp-${pair/:/}-$i"
        # tango exits 1 when the candidate is significantly slower somewhere;
        # its text output is kept for people.
        "$out/${pair%:*}/tango" --color never compare "$out/${pair#*:}/tango" --seed "$i" \
            --dump "$run" "${opts[@]}" >"$run.txt" 2>&1 || true
    done
    echo "run $i/$runs done" >&2
done
exec python3 "$root/bench/ab_report.py" "$out" "$stamp" "$runs" "$sha" $pairs
