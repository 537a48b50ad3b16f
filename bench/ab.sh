#!/usr/bin/env bash
# A/B of smalloc against an earlier revision of itself on every
# `bench --compare` row: builds the bench binary of REV (in a git worktree)
# and of the working tree, runs both with --smalloc-only, alternating
# (A B A B ...) RUNS times, and prints per row the median over runs of each
# side's median ns/op and their ratio.
#
#   bash bench/ab.sh REV [RUNS] [extra bench arguments...]
#
# Environment: OUT (default target/ab) holds the worktree, the builds and
# the raw CSVs (remove the worktree with `git worktree remove` when done).
# Needs the same tools as bench/compare.sh.
set -euo pipefail
rev="${1:?usage: bench/ab.sh REV [RUNS] [bench arguments...]}"
runs="${2:-5}"
shift $(($# >= 2 ? 2 : 1))
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/target/ab}"
mkdir -p "$out"
sha="$(git -C "$root" rev-parse --short "$rev")"
wt="$out/worktree-$sha"
if [ ! -d "$wt" ]; then
    git -C "$root" worktree add --detach "$wt" "$sha" >&2
fi
echo "== building bench at $sha (A) and at the working tree (B)" >&2
(cd "$wt" && CARGO_TARGET_DIR="$out/target-a" cargo build --release --quiet -p bench)
(cd "$root" && CARGO_TARGET_DIR="$out/target-b" cargo build --release --quiet -p bench)
stamp="$(date +%Y%m%d-%H%M%S)"
for ((i = 1; i <= runs; i++)); do
    for side in a b; do
        csv="$out/$stamp-$side-$i.csv"
        "$out/target-$side/release/bench" --compare --smalloc-only --format csv "$@" >"$csv"
    done
    echo "run $i/$runs done" >&2
done
python3 - "$out" "$stamp" "$runs" "$sha" <<'EOF'
import csv, statistics, sys
out, stamp, runs, sha = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
data = {}
for side in "ab":
    for i in range(1, runs + 1):
        with open(f"{out}/{stamp}-{side}-{i}.csv") as f:
            for r in csv.DictReader(f):
                if r["allocator"] != "smalloc":
                    continue
                key = (r["workload"], int(r["threads"]))
                data.setdefault(key, {"a": [], "b": []})[side].append(float(r["median_ns"]))
print(f"smalloc at {sha} (A) vs the working tree (B): median over {runs} alternating runs of")
print("each run's median ns/op; ratio = B / A (above 1.00: B slower)")
print(f"{'row':<26}{'A ns/op':>12}{'B ns/op':>12}{'B/A':>8}")
ratios = []
for (w, t), v in data.items():
    a, b = statistics.median(v["a"]), statistics.median(v["b"])
    ratios.append(b / a)
    flag = "  <-- slower by more than 3%" if b / a > 1.03 else ""
    print(f"{w + '@' + str(t):<26}{a:>12.2f}{b:>12.2f}{b / a:>8.3f}{flag}")
g = statistics.geometric_mean(ratios)
print(f"geometric mean B/A over {len(ratios)} rows: {g:.3f}")
EOF
