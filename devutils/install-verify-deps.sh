#!/usr/bin/env bash
# What devutils/verify.sh (and the Miri and fuzz steps of devutils/test.sh)
# need beyond the stable toolchain: a nightly toolchain with Miri and the
# standard library's sources (Miri's sysroot, -Zbuild-std for
# ThreadSanitizer) and llvm-tools (llvm-cov for the fuzz targets' coverage),
# cargo-fuzz, cargo-nextest and llvm-symbolizer (names in ThreadSanitizer
# reports and suppressions). Idempotent.
set -euo pipefail

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "== installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
installed=$(rustup component list --toolchain nightly --installed)
for c in miri rust-src llvm-tools; do
    if ! grep -q "^$c" <<<"$installed"; then
        echo "== installing nightly component $c"
        # (Older toolchains name llvm-tools llvm-tools-preview.)
        rustup component add --toolchain nightly "$c" ||
            rustup component add --toolchain nightly "$c-preview"
    fi
done
# Builds Miri's sysroot once (quiet when it is up to date).
cargo +nightly miri setup >/dev/null

if ! cargo nextest --version >/dev/null 2>&1; then
    echo "== installing cargo-nextest"
    cargo install cargo-nextest --locked --no-default-features --features default-no-update
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz (a few minutes, once)"
    cargo install cargo-fuzz --locked
fi
if ! command -v llvm-symbolizer >/dev/null 2>&1; then
    echo "== installing llvm (llvm-symbolizer)"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq llvm
fi
