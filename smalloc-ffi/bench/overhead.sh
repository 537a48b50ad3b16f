#!/usr/bin/env bash
# Instruction counts (valgrind --tool=callgrind) of one malloc/free pair of
# 32 bytes through the C entry points (LD_PRELOAD, called through the PLT
# like any program does) against the Rust GlobalAlloc path (direct calls,
# and std::alloc with smalloc as #[global_allocator]). Each count is the
# difference between runs of 200k and 100k pairs, divided by 100k, so
# process start-up cancels out; it includes the loop itself (a few
# instructions).
set -euo pipefail
cd "$(dirname "$0")/../.."
target=$(realpath "${CARGO_TARGET_DIR:-target}")
cargo build --release -p smalloc-ffi --example overhead
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -fno-builtin -o "$tmp/overhead_c" smalloc-ffi/bench/overhead.c

refs() { # command... -> total instructions
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$@" 2>&1 |
        sed -n 's/.*I *refs: *//p' | tr -d ,
}
per_pair() { # label command-with-N...
    local label=$1
    shift
    local a b
    a=$(refs "${@/N/100000}")
    b=$(refs "${@/N/200000}")
    echo "$label: $(((b - a) / 100000)) instructions per malloc/free pair"
}
# LD_PRELOAD on valgrind itself: it hands the variable to the program.
LD_PRELOAD="$target/release/libsmalloc.so" \
    per_pair "C malloc/free (LD_PRELOAD)" "$tmp/overhead_c" N
per_pair "Rust GlobalAlloc, direct" "$target/release/examples/overhead" direct N
per_pair "Rust std::alloc (#[global_allocator])" "$target/release/examples/overhead" global N
per_pair "glibc malloc/free (for reference)" "$tmp/overhead_c" N
