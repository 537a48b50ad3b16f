#!/usr/bin/env bash
# The many-core check, for a machine with many cores but no Rust toolchain
# and no C compiler (the device machine of DEVELOPERS.md): build here, run
# there.
#
#   bash bench/many-cores.sh pack DIR [REV]   # here: binaries into DIR
#   bash bench/many-cores.sh run DIR          # there: results into $OUT
#
# `pack` puts into DIR: libsmalloc.so of the working tree (and of commit REV
# as "before", if given), the LD_PRELOAD programs of bench/preload and
# `measure`, the Debian peers' libraries that are installed, and the
# `bench` binary (stripped). `run` runs, each bounded by `timeout`, the
# LD_PRELOAD programs (PROGRAMS, default larson xmalloc-test cache-scratch
# mstress kv heapread, at THREADS, default 16 32 64, RUNS 3 interleaved, through
# bench/preload/run.sh) and `bench --compare --threads BENCH_THREADS`
# (default 16,64), writing each table to $OUT (default /tmp/many-cores);
# then `peakfree` (a 1 GiB peak freed; the resident set after it) once under
# each allocator for each of PEAKFREE (default "-t 16;-t 16 -w idle;-t 64").
# Only the interleaved LD_PRELOAD runs compare smalloc with "before"
# reliably; bench rows run one allocator after another within a row.
set -euo pipefail
cmd="${1:?usage: bench/many-cores.sh pack|run DIR [REV]}"
dir="${2:?usage: bench/many-cores.sh pack|run DIR [REV]}"
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
programs="${PROGRAMS:-larson xmalloc-test cache-scratch mstress kv heapread}"

pack() {
    local rev="${1:-}" target="${CARGO_TARGET_DIR:-$root/target}" libdir
    mkdir -p "$dir/lib" "$dir/bin"
    (cd "$root" && cargo build --release --quiet -p smalloc-ffi -p bench)
    cp "$target/release/libsmalloc.so" "$dir/lib/smalloc.so"
    cp "$target/release/bench" "$dir/bin/bench"
    if [ -n "$rev" ]; then
        local wt="$target/many-cores-$rev"
        [ -d "$wt" ] || git -C "$root" worktree add --detach "$wt" "$rev" >&2
        (cd "$wt" && CARGO_TARGET_DIR="$target/many-cores-build" cargo build --release --quiet -p smalloc-ffi)
        cp "$target/many-cores-build/release/libsmalloc.so" "$dir/lib/before.so"
    fi
    for p in measure peakfree $programs; do
        cc -O2 -std=gnu11 -pthread -o "$dir/bin/$p" "$root/bench/preload/$p.c"
    done
    libdir="/usr/lib/$(cc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
    for l in libjemalloc.so.2 libmimalloc.so.2 libtcmalloc_minimal.so.4; do
        [ -f "$libdir/$l" ] && cp "$libdir/$l" "$dir/lib/"
    done
    strip "$dir/bin/"* "$dir/lib/"*.so* 2>/dev/null || true
    du -sh "$dir" >&2
}

run() {
    local out="${OUT:-/tmp/many-cores}" allocs="glibc smalloc" lib
    mkdir -p "$out"
    { nproc; lscpu | grep -E "Model name|NUMA node\(s\)" || true; uname -r; } | tee "$out/machine.txt"
    [ -f "$dir/lib/before.so" ] && allocs="$allocs before=$dir/lib/before.so"
    for lib in jemalloc:libjemalloc.so.2 mimalloc:libmimalloc.so.2 tcmalloc:libtcmalloc_minimal.so.4; do
        [ -f "$dir/lib/${lib#*:}" ] && allocs="$allocs ${lib%%:*}=$dir/lib/${lib#*:}"
    done
    BIN_DIR="$dir/bin" BUILD_SMALLOC=0 SMALLOC_SO="$dir/lib/smalloc.so" OUT=/tmp/many-cores-preload \
        PROGRAMS="$programs" THREADS="${THREADS:-16 32 64}" RUNS="${RUNS:-3}" ALLOCS="$allocs" \
        timeout "${PRELOAD_TIMEOUT:-300}" bash "$root/bench/preload/run.sh" >"$out/preload.txt" 2>&1 || true
    cp /tmp/many-cores-preload/results-*.tsv "$out/" 2>/dev/null || true
    grep -A40 "wall time" "$out/preload.txt" || tail -20 "$out/preload.txt"
    timeout "${BENCH_TIMEOUT:-200}" "$dir/bin/bench" --compare --threads "${BENCH_THREADS:-16,64}" \
        >"$out/bench.txt" 2>&1 || true
    grep -A60 "== summary" "$out/bench.txt" || tail -20 "$out/bench.txt"
    local args a
    IFS=';' read -ra peakfree_runs <<<"${PEAKFREE:--t 16;-t 16 -w idle;-t 64}"
    for args in "${peakfree_runs[@]}"; do
        for a in $allocs; do
            lib="$(case "$a" in glibc) ;; smalloc) echo "$dir/lib/smalloc.so" ;; *) echo "${a#*=}" ;; esac)"
            # shellcheck disable=SC2086 # the arguments are split on purpose
            printf '%s\t%s\t%s\n' "peakfree $args" "${a%%=*}" "$(LD_PRELOAD="$lib" timeout 30 "$dir/bin/peakfree" \
                $args -s 1.1 2>&1 | awk '/peak_rss/ { p = $2 } /after_1.00s/ { r = $2 " " $3 " " $4 } END { print p " KiB peak, " r }')"
        done
    done | tee "$out/peakfree.txt"
}

case "$cmd" in
    pack) pack "${3:-}" ;;
    run) run ;;
    *) echo "usage: bench/many-cores.sh pack|run DIR [REV]" >&2; exit 2 ;;
esac
