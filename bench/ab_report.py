"""The table of bench/ab.sh, from tango's CSV dumps of every sample.

usage: ab_report.py OUT STAMP RUNS SHA PAIR...  (PAIR: "b:a", and "a:a" for the control)

Run i of PAIR ("b:a": B's tango binary compares itself, the candidate, with
A's, the baseline) was dumped by `tango compare --dump OUT/STAMP-ba-i` (the
colon dropped): one NAME.csv per benchmark, NAME with "/" written "-", one
line per sample, `baseline_ns,candidate_ns,iterations`: the wall time in
nanoseconds of each side's sample of `iterations` iterations, the two taken
in lock step. OUT/STAMP-names.txt (`tango list`) gives back the names; without
it the file names are shown. Tango's text output beside the dumps
(OUT/STAMP-ba-i.txt) is for people and is not read.

Per benchmark and run: each side's time per iteration is the median over the
samples of time / iterations; the ratio B/A is the mean of B's samples over
the mean of A's (the ratio of the sample means, which is 1 + the change
tango prints; tango's `-o` outlier filter applies to its text only). Over
the runs: the median of each side's times, the median of the ratios and
their quartiles; then the geometric mean of the median ratios.
"""

import csv
import os
import statistics
import sys


def load(path):
    """(A ns per iteration, B ns per iteration, B/A) of one dump, or None if empty."""
    a, b = [], []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if len(row) == 3:
                iters = float(row[2])
                a.append(float(row[0]) / iters)
                b.append(float(row[1]) / iters)
    if not a:
        return None
    return statistics.median(a), statistics.median(b), statistics.fmean(b) / statistics.fmean(a)


def run(directory):
    """{file stem: load()} of one run's dump directory (empty if missing)."""
    if not os.path.isdir(directory):
        return {}
    rows = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".csv"):
            r = load(os.path.join(directory, name))
            if r:
                rows[name[: -len(".csv")]] = r
    return rows


def quartiles(xs):
    return statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3


out, stamp, runs, sha, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
data = {p: [run(f"{out}/{stamp}-{p.replace(':', '')}-{i}") for i in range(1, runs + 1)] for p in pairs}
control = "a:a" in data
# The benchmarks in tango's order, by file stem; their names from the list.
names = {}
if os.path.isfile(f"{out}/{stamp}-names.txt"):
    with open(f"{out}/{stamp}-names.txt") as f:
        names = {n.replace("/", "-"): n for n in (line.strip() for line in f) if n}
measured = {s for r in data["b:a"] for s in r}
stems = [s for s in names if s in measured] + sorted(measured - names.keys())
if not stems:
    sys.exit(f"ab_report: no dumps in {out}/{stamp}-*/ (tango's text: {out}/{stamp}-*.txt)")
print(f"smalloc at {sha} (A) vs the working tree (B), paired by tango, {runs} runs: medians over")
print("runs of each side's time per iteration (us; per run the median over samples); B/A = median")
print("of the per-run ratios (B's mean sample / A's = 1 + tango's change; above 1.00: B slower);")
print("q1, q3 = their quartiles" + ("; A'/A = A against itself" if control else ""))
head = f"{'benchmark':<40}{'A us':>10}{'B us':>10}{'B/A':>7}{'q1':>7}{'q3':>7}"
if control:
    head += f"{'A`/A':>7}{'q1':>7}{'q3':>7}"
print(head.replace("`", "'"))
ratios, controls = [], []
for s in stems:
    ab = [r[s] for r in data["b:a"] if s in r]
    r = [x[2] for x in ab]
    q = quartiles(r)
    ratio = statistics.median(r)
    ratios.append(ratio)
    a = statistics.median(x[0] for x in ab) / 1e3
    b = statistics.median(x[1] for x in ab) / 1e3
    line = f"{names.get(s, s):<40}{a:>10.2f}{b:>10.2f}{ratio:>7.3f}{q[0]:>7.3f}{q[2]:>7.3f}"
    if control:
        c = [r[s][2] for r in data["a:a"] if s in r]
        if c:
            controls.append(statistics.median(c))
            qc = quartiles(c)
            line += f"{controls[-1]:>7.3f}{qc[0]:>7.3f}{qc[2]:>7.3f}"
    if ratio > 1.03:
        line += "  <-- B slower by more than 3%" + (" (q1 too)" if q[0] > 1.03 else "")
    print(line)
print(f"geometric mean B/A over {len(ratios)} benchmarks: {statistics.geometric_mean(ratios):.3f}")
if controls:
    print(f"geometric mean A'/A: {statistics.geometric_mean(controls):.3f}")
