#!/usr/bin/env bash
# System packages the test suite uses. Idempotent; needs root (or sudo) on
# Debian/Ubuntu when something is missing, and is a no-op otherwise.
set -euo pipefail

need=()
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v c++ >/dev/null 2>&1 || need+=(g++)
# bench: snmalloc-rs builds snmalloc with cmake.
command -v cmake >/dev/null 2>&1 || need+=(cmake)
# smalloc-ffi's tests: ELF inspection, and the real programs run under
# LD_PRELOAD.
command -v readelf >/dev/null 2>&1 || need+=(binutils)
command -v objdump >/dev/null 2>&1 || need+=(binutils)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v git >/dev/null 2>&1 || need+=(git)
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v sort >/dev/null 2>&1 || need+=(coreutils)
command -v md5sum >/dev/null 2>&1 || need+=(coreutils)
# The core dump tests read core files with gdb.
command -v gdb >/dev/null 2>&1 || need+=(gdb)
# The valgrind build's tests run memcheck.
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
# aarch64 under emulation (devutils/aarch64.sh): the cross compilers (and
# their binutils) and qemu-user.
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu)
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)

if [ ${#need[@]} -gt 0 ]; then
    echo "== installing ${need[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi

# `--system-only`: the packages above, nothing built with cargo (what
# `bench --compare` needs).
[ "${1:-}" = "--system-only" ] && exit 0

# cbindgen, pinned: smalloc-ffi's header test regenerates include/smalloc.h
# and compares (keep in step with CBINDGEN_VERSION in
# smalloc-ffi/tests/header.rs).
CBINDGEN_VERSION=0.29.4
if [ "$(cbindgen --version 2>/dev/null)" != "cbindgen $CBINDGEN_VERSION" ]; then
    echo "== installing cbindgen $CBINDGEN_VERSION"
    cargo install cbindgen --locked --version "$CBINDGEN_VERSION"
fi
