# Sourced by run.sh and real.sh: which shared library each allocator is,
# building libsmalloc.so first. Needs: $allocs, $target, $root; optional
# SMALLOC_SO, BUILD_SMALLOC=0. Sets: lib_of, smalloc_so, present (the
# allocators whose library exists; the others are skipped with a message).

# The library of each allocator ("" for glibc: no preload). NAME=PATH names
# a library of your own to preload (e.g. another commit's libsmalloc.so, to
# see its peak RSS; bench/ab.sh is the A/B path for time).
libdir="/usr/lib/$(cc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
lib_of() {
    case "$1" in
        glibc) echo "" ;;
        smalloc) echo "$smalloc_so" ;;
        jemalloc) echo "$libdir/libjemalloc.so.2" ;;
        mimalloc) echo "$libdir/libmimalloc.so.2" ;;
        tcmalloc) echo "$libdir/libtcmalloc_minimal.so.4" ;;
        *=*) echo "${1#*=}" ;;
        *) echo "unknown allocator $1" >&2; exit 2 ;;
    esac
}
package_of() {
    case "$1" in
        jemalloc) echo libjemalloc2 ;;
        mimalloc) echo libmimalloc2.0 ;;
        tcmalloc) echo libtcmalloc-minimal4 ;;
    esac
}
if [ -n "${SMALLOC_SO:-}" ]; then
    smalloc_so="$SMALLOC_SO"
else
    smalloc_so="$target/release/libsmalloc.so"
    # Always rebuild unless told not to: a stale library has fooled us.
    if [ "${BUILD_SMALLOC:-1}" != 0 ] && [[ " $allocs " == *" smalloc "* ]]; then
        echo "== building libsmalloc.so (cargo build --release -p smalloc-ffi)" >&2
        (cd "$root" && cargo build --release --quiet -p smalloc-ffi)
    fi
fi
present=()
for a in $allocs; do
    lib="$(lib_of "$a")"
    if [ -n "$lib" ] && [ ! -f "$lib" ]; then
        pkg="$(package_of "$a")"
        echo "skipping $a: $lib not found${pkg:+ (apt-get install $pkg)}" >&2
        continue
    fi
    present+=("$a")
done
