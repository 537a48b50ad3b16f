#!/usr/bin/env bash
# Builds simd-json-bench once per global allocator (one binary per cargo
# feature) and runs them interleaved with --compare, printing smalloc's
# ratio to each. Arguments go to simd-json-bench (e.g. --rounds 9, --ms 500,
# --threads 2, --files twitter,canada).
#
#   ALLOCS="smalloc system mimalloc"  the builds to compare (default: all six)
#   DATA=DIR                          the corpus (default: ../shared/json-corpus
#                                     beside the repository if it exists);
#                                     DATA= (empty) uses generated documents
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
out="$target/simd-json-bench-variants"
mkdir -p "$out"

allocs="${ALLOCS:-smalloc system mimalloc jemalloc snmalloc rpmalloc}"
if [ -z "${DATA+set}" ] && [ -d "$root/../shared/json-corpus" ]; then
    DATA="$(cd "$root/../shared/json-corpus" && pwd)"
fi

builds=""
for a in $allocs; do
    features=()
    [ "$a" != system ] && features=(--features "$a")
    echo "== building simd-json-bench with the $a allocator" >&2
    cargo build --release --quiet -p simd-json-bench "${features[@]}"
    cp "$target/release/simd-json-bench" "$out/simd-json-bench-$a"
    builds="${builds:+$builds,}$a=$out/simd-json-bench-$a"
done

data_args=()
[ -n "${DATA:-}" ] && data_args=(--data "$DATA")
first="${allocs%% *}"
exec "$out/simd-json-bench-$first" --compare "$builds" "${data_args[@]}" "$@"
