#!/usr/bin/env bash
# Instruction counts (valgrind --tool=callgrind) of one malloc/free pair of
# 32 bytes through the C entry points (LD_PRELOAD, called through the PLT
# like any program does) against the Rust GlobalAlloc path (direct calls,
# and std::alloc with smalloc as #[global_allocator]). Each count is the
# difference between runs of 200k and 100k pairs, divided by 100k, so
# process start-up cancels out; it includes the loop itself (a few
# instructions). Last, the same for one free of a block another thread
# allocated (`remote_free.c`), counted in the freeing loop only: the cold
# path of every cross-thread free; and for larson's step, that free and then
# an allocation of its size (`replace.c`, counted in its loop only), also
# by a thread that owns no slab.
#
# For comparison it also builds mimalloc as a release shared library from
# the C source that the libmimalloc-sys crate (the bench crate's mimalloc
# dependency) ships in the cargo registry, in a temporary directory, and
# measures its malloc/free the same way under LD_PRELOAD. If that source
# cannot be found or built, or mimalloc is not seen to be in use, its line
# says SKIPPED and the other lines are printed as usual.
#
# FEATURES=counters (cargo features of smalloc-ffi) measures such a build;
# give it its own CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=$(realpath "${CARGO_TARGET_DIR:-target}")
cargo build --release -p smalloc-ffi --lib --example overhead ${FEATURES:+--features "$FEATURES"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -fno-builtin -o "$tmp/overhead_c" smalloc-ffi/bench/overhead.c
cc -O2 -fno-builtin -pthread -o "$tmp/remote_free" smalloc-ffi/bench/remote_free.c
cc -O2 -fno-builtin -pthread -o "$tmp/replace" smalloc-ffi/bench/replace.c

refs() { # [valgrind options] command... -> total instructions
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$@" 2>&1 |
        sed -n 's/.*I *refs: *//p' | tr -d ,
}
per_pair() { # label command-with-N...
    local label=$1
    shift
    local a b
    a=$(refs "${@/N/100000}")
    b=$(refs "${@/N/200000}")
    echo "$label: $(per_100k $((b - a))) instructions per malloc/free pair"
}
per_100k() { # instructions of 100,000 repetitions -> per repetition
    # Rounded: truncated, 3,899,991 read as 38 (counts move with the environment's size).
    echo $((($1 + 50000) / 100000))
}
per_step() { # library program function [argument] -> instructions per step of the function's loop
    local a b
    a=$(LD_PRELOAD="$1" refs --toggle-collect="$3" "$tmp/$2" 100000 ${4:-}) || return 1
    b=$(LD_PRELOAD="$1" refs --toggle-collect="$3" "$tmp/$2" 200000 ${4:-}) || return 1
    [[ $a =~ ^[0-9]+$ && $b =~ ^[0-9]+$ ]] || return 1
    per_100k $((b - a))
}

# mimalloc, release build from the source in the cargo registry. Everything
# here reports failure by return status (no errexit inside an if), so that
# mimalloc can never stop the script.
mi_lib="$tmp/mimalloc/libmimalloc.so"
mi_skip=""
mi_version=""
find_mimalloc_src() { # -> sets mi_src (the directory with include/ and src/)
    local meta manifest crate features="" flavor dir
    meta=$(cargo metadata --format-version 1 2>"$tmp/mi-meta.err") ||
        { mi_skip="cargo metadata failed"; return 1; }
    if command -v jq >/dev/null; then
        manifest=$(jq -r '.packages[] | select(.name == "libmimalloc-sys")
            | .manifest_path' <<<"$meta" | head -n 1)
        # The flavour (v2 or v3) the bench crate builds: libmimalloc-sys's
        # build.rs takes v2 if its feature "v2" is on, else v3.
        features=$(jq -r '.resolve.nodes[]? | select(.id | test("libmimalloc-sys"))
            | .features[]?' <<<"$meta")
    else
        manifest=$(grep -o '"manifest_path":"[^"]*/libmimalloc-sys-[^"/]*/Cargo.toml"' \
            <<<"$meta" | head -n 1 | sed 's/^"manifest_path":"//; s/"$//')
    fi
    [[ -n $manifest ]] ||
        { mi_skip="libmimalloc-sys is not a dependency of the workspace"; return 1; }
    crate=$(dirname "$manifest")
    if [[ ! -d $crate/c_src ]]; then
        cargo fetch >/dev/null 2>&1 || true
    fi
    flavor=v3
    if grep -qx v2 <<<"$features"; then flavor=v2; fi
    # Older libmimalloc-sys releases have one source tree, without v2/v3.
    for dir in "$crate/c_src/mimalloc/$flavor" "$crate/c_src/mimalloc"; do
        if [[ -f $dir/include/mimalloc.h && -f $dir/src/static.c ]]; then
            mi_src=$dir
            return 0
        fi
    done
    mi_skip="no mimalloc C source under $crate/c_src (run cargo fetch?)"
    return 1
}
build_mimalloc() { # -> builds $mi_lib, sets mi_version
    local v
    find_mimalloc_src || return 1
    v=$(sed -n 's/^#define MI_MALLOC_VERSION *\([0-9]*\).*/\1/p' \
        "$mi_src/include/mimalloc.h")
    if [[ $v =~ ^[0-9]+$ ]]; then
        if ((v >= 10000)); then # major, 2 digits minor, 2 digits patch
            mi_version="$((v / 10000)).$((v / 100 % 100)).$((v % 100))"
        else # older: one digit each
            mi_version="$((v / 100)).$((v / 10 % 10)).$((v % 10))"
        fi
    fi
    mi_label="mimalloc ${mi_version:-(unknown version)} malloc/free (LD_PRELOAD, release build from source)"
    # What mimalloc's CMakeLists.txt uses for its shared library with the
    # default options and CMAKE_BUILD_TYPE=Release on Linux with GCC or
    # Clang (MI_SECURE, MI_DEBUG, MI_PADDING, MI_OPT_ARCH off; MI_OVERRIDE
    # on): -O3 -DNDEBUG, C11 with extensions, -fPIC, hidden visibility,
    # initial-exec TLS, -fno-builtin-malloc, and the defines below (its
    # warning flags -Wall -Wextra -Wstrict-prototypes left out). CMake
    # compiles the sources one by one; static.c includes the same sources
    # in one unit (the malloc and free fast paths are in one unit either
    # way: alloc.c includes free.c and alloc-override.c).
    local flags=(-std=gnu11 -O3 -DNDEBUG -fPIC -fvisibility=hidden
        -ftls-model=initial-exec -fno-builtin-malloc -Wno-unknown-pragmas
        -DMI_CMAKE_BUILD_TYPE=release -DMI_BUILD_RELEASE -DMI_SHARED_LIB
        -DMI_SHARED_LIB_EXPORT -DMI_MALLOC_OVERRIDE)
    mkdir -p "$(dirname "$mi_lib")"
    echo "building mimalloc ${mi_version:-?} from $mi_src: cc ${flags[*]} -shared src/static.c -lpthread -lrt" >&2
    cc "${flags[@]}" -I "$mi_src/include" -shared -o "$mi_lib" \
        "$mi_src/src/static.c" -lpthread -lrt 2>"$tmp/mi-build.log" ||
        { tail -n 20 "$tmp/mi-build.log" >&2; mi_skip="build of $mi_src failed"; return 1; }
    # Is it really mimalloc that runs? With MIMALLOC_VERBOSE=1 mimalloc
    # prints "mimalloc: process init" and its version and build type.
    local out
    out=$(MIMALLOC_VERBOSE=1 LD_PRELOAD="$mi_lib" "$tmp/overhead_c" 1 2>&1) ||
        { mi_skip="overhead_c failed under LD_PRELOAD=libmimalloc.so"; return 1; }
    grep -q '^mimalloc: process init' <<<"$out" ||
        { mi_skip="no mimalloc output with MIMALLOC_VERBOSE=1: library not in use"; return 1; }
    echo "mimalloc in use (MIMALLOC_VERBOSE=1): $(grep -m1 '^v[0-9]' <<<"$out" || echo '?')" >&2
}
mimalloc_per_pair() { # -> instructions per pair; fails unless the profile shows mimalloc's malloc and free
    local a b ann
    a=$(LD_PRELOAD="$mi_lib" refs "$tmp/overhead_c" 100000) || return 1
    b=$(LD_PRELOAD="$mi_lib" refs "$tmp/overhead_c" 200000) || return 1
    [[ $a =~ ^[0-9]+$ && $b =~ ^[0-9]+$ ]] || return 1
    # The 200k-pair profile must attribute malloc and free to libmimalloc.so.
    ann=$(callgrind_annotate --threshold=100 "$tmp/cg.out" 2>/dev/null) || return 1
    grep -qF ":malloc [$mi_lib]" <<<"$ann" && grep -qF ":free [$mi_lib]" <<<"$ann" || return 1
    per_100k $((b - a))
}
mi_label="mimalloc malloc/free (LD_PRELOAD, release build from source)"
build_mimalloc || true

# LD_PRELOAD on valgrind itself: it hands the variable to the program.
LD_PRELOAD="$target/release/libsmalloc.so" \
    per_pair "C malloc/free (LD_PRELOAD)" "$tmp/overhead_c" N
per_pair "Rust GlobalAlloc, direct" "$target/release/examples/overhead" direct N
per_pair "Rust std::alloc (#[global_allocator])" "$target/release/examples/overhead" global N
per_pair "glibc malloc/free (for reference)" "$tmp/overhead_c" N
if [[ -n $mi_skip ]]; then
    echo "$mi_label: SKIPPED ($mi_skip)"
elif mi_n=$(mimalloc_per_pair); then
    echo "$mi_label: $mi_n instructions per malloc/free pair"
else
    echo "$mi_label: SKIPPED (measurement failed or libmimalloc.so not seen in the profile)"
fi
# Frees of blocks another thread allocated (`remote_free.c`: sizes 16 B to
# about 1 KiB, the freeing thread owning a slab of its own): the cold path
# every producer/consumer free takes.
echo "C free of a block another thread allocated (LD_PRELOAD): $(per_step "$target/release/libsmalloc.so" remote_free free_all) instructions per free"
if [[ -z $mi_skip ]] && mi_n=$(per_step "$mi_lib" remote_free free_all); then
    echo "mimalloc ${mi_version:-?} free of a block another thread allocated: $mi_n instructions per free"
fi
# Larson's step (`replace.c`): a free of another thread's block, then an
# allocation of its size, which finds the thread's own supply empty (the
# slot it just held, in smalloc).
echo "C replace of a block another thread allocated (LD_PRELOAD): $(per_step "$target/release/libsmalloc.so" replace replace_all) instructions per free+malloc"
if [[ -z $mi_skip ]] && mi_n=$(per_step "$mi_lib" replace replace_all); then
    echo "mimalloc ${mi_version:-?} replace of a block another thread allocated: $mi_n instructions per free+malloc"
fi
echo "C replace, by a thread beyond the slabs (a guest; LD_PRELOAD): $(per_step "$target/release/libsmalloc.so" replace replace_all guest) instructions per free+malloc"
