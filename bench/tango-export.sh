#!/usr/bin/env bash
# Builds the tango bench target (bench/benches/tango) and copies the binary
# to OUT, so it can serve as the baseline of a later paired comparison:
#
#   bash bench/tango-export.sh OUT [cargo options, e.g. --features global-mimalloc]
#   cargo bench -p bench --bench tango -- compare OUT
#
# The build is of the repository this script lives in (run a worktree's own
# copy to export another commit). Respects CARGO_TARGET_DIR.
set -euo pipefail
if [ $# -lt 1 ]; then
    echo "usage: $0 OUT [cargo options]" >&2
    exit 2
fi
out="$1"
shift
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
cd "$(dirname "$0")/.."
exe="$(cargo bench -p bench --bench tango --no-run --message-format=json "$@" |
    grep '"name":"tango"' | grep -o '"executable":"[^"]*"' | tail -n 1 | cut -d'"' -f4)"
if [ -z "$exe" ] || [ ! -x "$exe" ]; then
    echo "tango-export: cargo did not report the tango bench executable" >&2
    exit 1
fi
mkdir -p "$(dirname "$out")"
cp "$exe" "$out"
echo "$out: tango bench binary, global allocator $("$out" --which)"
