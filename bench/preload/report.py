#!/usr/bin/env python3
"""Summarizes the raw results of bench/preload/run.sh: for every
program@threads, the median wall time and peak RSS of each allocator over
its runs, side by side, with each allocator's ratio to glibc.

usage: report.py RESULTS.tsv
"""
import csv
import statistics
import sys
from collections import OrderedDict


def load(path):
    rows = list(csv.DictReader(open(path), delimiter="\t"))
    cells = OrderedDict()
    allocs = []
    for r in rows:
        key = (r["program"], int(r["threads"]))
        cells.setdefault(key, {}).setdefault(r["allocator"], []).append(r)
        if r["allocator"] not in allocs:
            allocs.append(r["allocator"])
    # glibc first, smalloc second, the rest as they came.
    order = [a for a in ("glibc", "smalloc") if a in allocs]
    order += [a for a in allocs if a not in order]
    return cells, order


def summary(runs, field):
    """(median, MAD in % of the median, failures) of the successful runs."""
    ok = [float(r[field]) for r in runs if r["status"] == "0"]
    failed = len(runs) - len(ok)
    if not ok:
        return None, None, failed
    med = statistics.median(ok)
    mad = statistics.median([abs(x - med) for x in ok])
    return med, (mad / med * 100 if med else 0.0), failed


def table(cells, allocs, field, title, unit_fmt):
    print(f"== {title}")
    label_w = 20
    head = f"{'program@threads':<{label_w}}" + "".join(f"{a:>15}" for a in allocs)
    peers = [a for a in allocs if a != "glibc"]
    if "glibc" in allocs:
        head += "".join(f"{a + '/glibc':>17}" for a in peers)
    print(head)
    for (prog, threads), by_alloc in cells.items():
        line = f"{prog + '@' + str(threads):<{label_w}}"
        meds = {}
        for a in allocs:
            med, mad, failed = summary(by_alloc.get(a, []), field)
            if med is None:
                cell = "FAIL" if failed else "-"
            else:
                meds[a] = med
                cell = unit_fmt(med) + (f" ±{mad:.0f}%" if mad is not None else "")
                if failed:
                    cell += f" ({failed} failed)"
            line += f"{cell:>15}"
        if "glibc" in allocs:
            for a in peers:
                if a in meds and meds.get("glibc"):
                    r = meds[a] / meds["glibc"]
                    line += f"{r:>16.2f}x"
                else:
                    line += f"{'-':>17}"
        print(line)
    print()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    cells, allocs = load(sys.argv[1])
    runs = max(len(v) for c in cells.values() for v in c.values())
    print(f"bench/preload: {', '.join(allocs)}; median of {runs} runs (±: median absolute deviation)")
    print("ratio = allocator / glibc: below 1.00 = less time (or memory) than glibc")
    print()
    table(cells, allocs, "wall_s", "wall time, seconds", lambda v: f"{v:.3f}")
    table(cells, allocs, "maxrss_kib", "peak RSS, MiB", lambda v: f"{v / 1024:.1f}")


if __name__ == "__main__":
    main()
