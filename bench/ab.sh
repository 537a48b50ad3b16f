#!/usr/bin/env bash
# A/B of smalloc against an earlier revision of itself on every
# `bench --compare` row: builds the bench binary of REV (in a git worktree)
# and of the working tree, runs both with --smalloc-only, alternating
# (A B A B ...) RUNS times, and prints per row the median over runs of each
# side's median ns/op, their ratio, and the quartiles of the per-run ratios
# B/A (each run's B against the A run just before it).
#
#   bash bench/ab.sh REV [RUNS] [extra bench arguments...]
#
# Environment: OUT (default target/ab) holds the worktree, the builds and
# the raw CSVs (remove the worktree with `git worktree remove` when done).
# CONTROL=1 also runs A a second time in each round (A B A'), and prints
# A'/A: the same binary against itself, i.e. how far this machine's noise
# alone moves each row. Needs the same tools as bench/compare.sh.
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
sides="a b"
[ "${CONTROL:-0}" = 1 ] && sides="a b c"
stamp="$(date +%Y%m%d-%H%M%S)"
for ((i = 1; i <= runs; i++)); do
    for side in $sides; do
        bin="$out/target-$side/release/bench"
        [ "$side" = c ] && bin="$out/target-a/release/bench"
        "$bin" --compare --smalloc-only --format csv "$@" >"$out/$stamp-$side-$i.csv" 2>/dev/null
    done
    echo "run $i/$runs done" >&2
done
python3 - "$out" "$stamp" "$runs" "$sha" $sides <<'EOF'
import csv, statistics, sys
out, stamp, runs, sha, sides = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
data = {}
for side in sides:
    for i in range(1, runs + 1):
        with open(f"{out}/{stamp}-{side}-{i}.csv") as f:
            for r in csv.DictReader(f):
                if r["allocator"] != "smalloc":
                    continue
                key = (r["workload"], int(r["threads"]))
                data.setdefault(key, {s: [] for s in sides})[side].append(float(r["median_ns"]))

def quartiles(a, b):
    r = sorted(y / x for x, y in zip(a, b))
    return statistics.quantiles(r, n=4) if len(r) > 1 else [r[0]] * 3

print(f"smalloc at {sha} (A) vs the working tree (B): median over {runs} alternating runs of")
print("each run's median ns/op; B/A = ratio of the medians (above 1.00: B slower); q1, q3 =")
print("quartiles of the per-run ratios" + ("; A'/A = A against itself (the noise)" if "c" in sides else ""))
head = f"{'row':<26}{'A ns/op':>10}{'B ns/op':>10}{'B/A':>7}{'q1':>7}{'q3':>7}"
if "c" in sides:
    head += f"{'A`/A':>7}{'q1':>7}{'q3':>7}"
print(head.replace("`", "'"))
ratios, controls = [], []
for (w, t), v in data.items():
    a, b = statistics.median(v["a"]), statistics.median(v["b"])
    q = quartiles(v["a"], v["b"])
    ratios.append(b / a)
    line = f"{w + '@' + str(t):<26}{a:>10.2f}{b:>10.2f}{b / a:>7.3f}{q[0]:>7.3f}{q[2]:>7.3f}"
    if "c" in sides:
        c = statistics.median(v["c"])
        qc = quartiles(v["a"], v["c"])
        controls.append(c / a)
        line += f"{c / a:>7.3f}{qc[0]:>7.3f}{qc[2]:>7.3f}"
    if b / a > 1.03:
        line += "  <-- B slower by more than 3%" + (" (q1 too)" if q[0] > 1.03 else "")
    print(line)
print(f"geometric mean B/A over {len(ratios)} rows: {statistics.geometric_mean(ratios):.3f}")
if controls:
    print(f"geometric mean A'/A: {statistics.geometric_mean(controls):.3f}")
EOF
