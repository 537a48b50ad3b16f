#!/usr/bin/env bash
# Compiles the stress programs of bench/preload and runs each under glibc's
# malloc, smalloc (libsmalloc.so) and the Debian peer libraries that are
# installed, with LD_PRELOAD, interleaved (run 1 of every allocator, then
# run 2, ...), measuring wall time and peak RSS (wait4) of every run; then
# prints medians side by side with ratios to glibc. See bench/README.md.
#
# Environment (all optional):
#   PROGRAMS   programs to run (default: larson xmalloc-test cache-thrash cache-scratch mstress
#              kv kv100 heapread; kv100 is kv with 100-byte values)
#   ALLOCS     allocators (default: glibc smalloc jemalloc mimalloc tcmalloc;
#              also NAME=path/to/lib.so: any library of your own)
#   THREADS    thread counts (default: "2 8", and "2 8 32 64" for larson and xmalloc-test,
#              the programs that free across threads: past the 16 slabs)
#   RUNS       runs of each (program, threads, allocator) (default 5)
#   SCALE      multiplies every program's amount of work (default 1; 0.1 is quick)
#   QUICK=1    tiny parameters and one run: checks that everything works
#   SMALLOC_SO libsmalloc.so to use (default: $CARGO_TARGET_DIR/release/libsmalloc.so,
#              built first with cargo unless BUILD_SMALLOC=0)
#   OUT        where binaries, logs and raw results go (default: $CARGO_TARGET_DIR/preload-bench)
#   BIN_DIR    take the programs (and measure) from here instead of compiling them
#              (a machine without a C compiler: build them elsewhere)
#   LARSON_ARGS, XMALLOC_ARGS, THRASH_ARGS, SCRATCH_ARGS, MSTRESS_ARGS, KV_ARGS, HEAPREAD_ARGS
#              extra arguments appended to that program's command line
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
out="${OUT:-$target/preload-bench}"
mkdir -p "$out/bin" "$out/logs"

programs="${PROGRAMS:-larson xmalloc-test cache-thrash cache-scratch mstress kv kv100 heapread}"
allocs="${ALLOCS:-glibc smalloc jemalloc mimalloc tcmalloc}"
# The thread counts of program $1.
threads_of() {
    case "$1" in
        larson | xmalloc-test) echo "${THREADS:-2 8 32 64}" ;;
        *) echo "${THREADS:-2 8}" ;;
    esac
}
runs="${RUNS:-5}"
scale="${SCALE:-1}"
if [ "${QUICK:-0}" = 1 ]; then
    runs=1
    scale=0.002
fi

if [ -n "${BIN_DIR:-}" ]; then
    echo "== programs built before, from $BIN_DIR" >&2
    for p in measure $programs; do cp "$BIN_DIR/$p" "$out/bin/$p"; done
else
    command -v cc >/dev/null || { echo "run.sh: no C compiler (cc); install gcc" >&2; exit 1; }
    echo "== compiling into $out/bin" >&2
    for p in measure $programs; do
        src="$p"
        [ "$p" = kv100 ] && src=kv
        cc -O2 -g -std=gnu11 -pthread -Wall -Wextra -Werror -o "$out/bin/$p" "$here/$src.c"
    done
fi

. "$here/allocators.sh"

# The command line of program $1 at $2 threads: a fixed total amount of
# work (times SCALE) split over the threads.
work() { awk -v t="$1" -v s="$scale" -v d="$2" 'BEGIN { n = int(t * s / d); print (n < 1 ? 1 : n) }'; }
args_of() {
    local p="$1" t="$2"
    case "$p" in
        larson) echo "-t $t -r 5 -n $(work 12000000 $((5 * t))) ${LARSON_ARGS:-}" ;;
        xmalloc-test) echo "-t $t -n $(work 4000000 "$t") ${XMALLOC_ARGS:-}" ;;
        cache-thrash) echo "-t $t -n $(work 1000000 1) ${THRASH_ARGS:-}" ;;
        cache-scratch) echo "-t $t -n $(work 1000000 1) ${SCRATCH_ARGS:-}" ;;
        mstress) echo "-t $t -r 10 -n $(work 800000 $((10 * t))) ${MSTRESS_ARGS:-}" ;;
        kv) echo "-t $t -k $(work 40000 "$t") -n $(work 400000 "$t") -v 2048 ${KV_ARGS:-}" ;;
        kv100) echo "-t $t -k $(work 200000 "$t") -n $(work 2000000 "$t") -v 100 ${KV_ARGS:-}" ;;
        heapread) echo "-t $t -n 32K -r $(work 40000000 "$t") ${HEAPREAD_ARGS:-}" ;;
        *) echo "run.sh: unknown program $p" >&2; exit 2 ;;
    esac
}

stamp="$(date +%Y%m%d-%H%M%S)"
results="$out/results-$stamp.tsv"
printf 'program\tthreads\tallocator\trun\twall_s\tmaxrss_kib\tuser_s\tsys_s\tstatus\n' >"$results"
n=${#present[@]}
if [ "$n" -eq 0 ]; then
    echo "run.sh: none of the allocators ($allocs) is available" >&2
    exit 1
fi
echo "== ${present[*]}; threads ${THREADS:-2 8 (larson, xmalloc-test: 2 8 32 64)}; $runs runs; scale $scale; raw results: $results" >&2
for ((run = 1; run <= runs; run++)); do
    for p in $programs; do
        for t in $(threads_of "$p"); do
            # Rotate the order every run so slow drifts hit everyone.
            for ((k = 0; k < n; k++)); do
                a="${present[$(((k + run - 1) % n))]}"
                lib="$(lib_of "$a")"
                log="$out/logs/$p-$t-${a%%=*}-$run.log"
                rm -f "$out/m.txt"
                # shellcheck disable=SC2046 # word splitting of the arguments is intended
                if "$out/bin/measure" ${lib:+-p "$lib"} -o "$out/m.txt" -- "$out/bin/$p" \
                    $(args_of "$p" "$t") >"$log" 2>&1; then
                    :
                else
                    echo "FAILED: $p -t $t under $a (run $run); see $log" >&2
                fi
                wall=nan rss=0 user=nan sys=nan status=-1
                [ -s "$out/m.txt" ] && read -r wall rss user sys status <"$out/m.txt"
                printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$p" "$t" "${a%%=*}" "$run" "$wall" "$rss" \
                    "$user" "$sys" "$status" >>"$results"
            done
        done
    done
    echo "run $run/$runs done" >&2
done

python3 "$here/report.py" "$results"
