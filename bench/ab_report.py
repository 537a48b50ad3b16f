"""The table of bench/ab.sh from the raw tango outputs OUT/STAMP-PAIR-RUN.txt.

usage: ab_report.py OUT STAMP RUNS SHA PAIR... (PAIR: "b:a", and "a:a" for the control)
"""
import re
import statistics
import sys

LINE = re.compile(r"^(\S+)\s+\[\s*([\d.]+) (ns|us|ms|s) \.\.\.\s*([\d.]+) (ns|us|ms|s) \]\s+([+-]?[\d.]+)%")
SCALE = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def parse(path):
    """{benchmark: (baseline us, candidate us, candidate/baseline)} of one tango output."""
    rows = {}
    with open(path) as f:
        for raw in f:
            m = LINE.match(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", raw).strip())
            if m:
                a = float(m[2]) * SCALE[m[3]]
                b = float(m[4]) * SCALE[m[5]]
                rows[m[1]] = (a, b, 1 + float(m[6]) / 100)
    return rows


def quartiles(xs):
    return statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3


out, stamp, runs, sha, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
data = {p: [parse(f"{out}/{stamp}-{p.replace(':', '')}-{i}.txt") for i in range(1, runs + 1)] for p in pairs}
control = "a:a" in data
names = list(dict.fromkeys(n for run in data["b:a"] for n in run))
print(f"smalloc at {sha} (A) vs the working tree (B), paired by tango, {runs} runs: medians over")
print("runs of each side's time per iteration (us); B/A = median of the per-run ratios (1 + tango's")
print("change; above 1.00: B slower); q1, q3 = their quartiles" + ("; A'/A = A against itself" if control else ""))
head = f"{'benchmark':<40}{'A us':>10}{'B us':>10}{'B/A':>7}{'q1':>7}{'q3':>7}"
if control:
    head += f"{'A`/A':>7}{'q1':>7}{'q3':>7}"
print(head.replace("`", "'"))
ratios, controls = [], []
for n in names:
    ab = [run[n] for run in data["b:a"] if n in run]
    r = [x[2] for x in ab]
    q = quartiles(r)
    ratio = statistics.median(r)
    ratios.append(ratio)
    a = statistics.median(x[0] for x in ab)
    b = statistics.median(x[1] for x in ab)
    line = f"{n:<40}{a:>10.2f}{b:>10.2f}{ratio:>7.3f}{q[0]:>7.3f}{q[2]:>7.3f}"
    if control:
        c = [run[n][2] for run in data["a:a"] if n in run]
        if c:
            controls.append(statistics.median(c))
            qc = quartiles(c)
            line += f"{controls[-1]:>7.3f}{qc[0]:>7.3f}{qc[2]:>7.3f}"
    if ratio > 1.03:
        line += "  <-- B slower by more than 3%" + (" (q1 too)" if q[0] > 1.03 else "")
    print(line)
if not ratios:
    sys.exit(f"ab_report: no results in {out}/{stamp}-*.txt (see those files)")
print(f"geometric mean B/A over {len(ratios)} benchmarks: {statistics.geometric_mean(ratios):.3f}")
if controls:
    print(f"geometric mean A'/A: {statistics.geometric_mean(controls):.3f}")
