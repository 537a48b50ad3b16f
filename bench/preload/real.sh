#!/usr/bin/env bash
# Real programs under LD_PRELOAD: python3, sqlite3, git gc and gcc, each run
# under glibc's malloc, smalloc and the Debian peer libraries that are
# installed, interleaved (git gc runs on a fresh copy of a generated
# repository each time); prints median wall time and peak RSS with ratios
# to glibc. Python runs with PYTHONMALLOC=malloc for every allocator, so its
# small objects reach malloc instead of pymalloc.
#
# Environment (optional): RUNS (default 3), PROGRAMS (default: python
# sqlite git-gc gcc), ALLOCS (default: glibc smalloc
# jemalloc mimalloc tcmalloc; NAME=path/to/lib.so adds a library of your
# own, e.g. an older libsmalloc.so), SMALLOC_SO or BUILD_SMALLOC=0, OUT
# (work directory).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
out="${OUT:-$target/preload-real}"
runs="${RUNS:-3}"
allocs="${ALLOCS:-glibc smalloc jemalloc mimalloc tcmalloc}"
mkdir -p "$out"
cc -O2 -std=gnu11 -o "$out/measure" "$here/measure.c"
. "$here/allocators.sh"

# Inputs, made once.
cat > "$out/py.py" <<'EOF'
import json, random
random.seed(7)
rows = [{"id": i, "name": "n%d" % random.randrange(10**6), "v": [random.random() for _ in range(4)]}
        for i in range(400_000)]
rows.sort(key=lambda r: (r["name"], r["id"]))
s = json.dumps(rows)
back = json.loads(s)
assert back == rows
print(len(s))
EOF
{
    echo "CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v REAL);"
    echo "BEGIN;"
    echo "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 300000)"
    echo "INSERT INTO t SELECT x, hex(randomblob(12)), x * 0.5 FROM c;"
    echo "COMMIT;"
    echo "CREATE INDEX tk ON t(k);"
    echo "SELECT count(*), sum(v) FROM t WHERE k > '8';"
    echo "SELECT k, count(*) FROM t GROUP BY substr(k, 1, 3) ORDER BY 2 DESC LIMIT 3;"
} > "$out/sql.sql"
python3 - "$out/big.c" <<'EOF'
import sys
with open(sys.argv[1], "w") as f:
    f.write("#include <stdio.h>\n")
    for i in range(1500):
        f.write(f"static int f{i}(int x) {{ int a[16]; for (int j = 0; j < 16; j++) a[j] = x * {i} + j; "
                f"int s = 0; for (int j = 0; j < 16; j++) s += a[j] ^ (s << 1); return s; }}\n")
    f.write("int main(void) { int s = 0;\n")
    for i in range(1500):
        f.write(f"  s += f{i}(s);\n")
    f.write('  printf("%d\\n", s); return 0; }\n')
EOF
if [ ! -d "$out/repo0/.git" ]; then
    rm -rf "$out/repo0"
    git init -q "$out/repo0"
    (
        cd "$out/repo0"
        git config user.email bench@example.invalid
        git config user.name bench
        for c in $(seq 1 30); do
            for f in $(seq 1 60); do
                printf 'file %d commit %d\n%s\n' "$f" "$c" "$(seq "$c" $((c + f * 20)))" > "f$f.txt"
            done
            git add -A && git commit -qm "commit $c"
        done
    )
fi

run_one() { # alloc program -> prints "wall rss_kib"
    local a="$1" p="$2" l pre=()
    l="$(lib_of "$a")"
    [ -n "$l" ] && pre=(-p "$l")
    case "$p" in
        python) PYTHONMALLOC=malloc "$out/measure" "${pre[@]}" -o "$out/m" -- python3 "$out/py.py" > /dev/null ;;
        sqlite) rm -f "$out/db.sqlite"; "$out/measure" "${pre[@]}" -o "$out/m" -- sqlite3 "$out/db.sqlite" < "$out/sql.sql" > /dev/null ;;
        git-gc) rm -rf "$out/repo"; cp -a "$out/repo0" "$out/repo"
            "$out/measure" "${pre[@]}" -o "$out/m" -- git -C "$out/repo" gc -q --prune=now > /dev/null ;;
        gcc) "$out/measure" "${pre[@]}" -o "$out/m" -- gcc -O2 -o "$out/big" "$out/big.c" > /dev/null ;;
    esac
    awk '{print $1, $2}' "$out/m"
}

programs="${PROGRAMS:-python sqlite git-gc gcc}"
results="$out/results.txt"
: > "$results"
for r in $(seq 1 "$runs"); do
    for p in $programs; do
        for a in "${present[@]}"; do
            echo "$p ${a%%=*} $(run_one "$a" "$p")" >> "$results"
        done
    done
    echo "run $r/$runs done" >&2
done

python3 - "$results" "${present[@]}" <<'EOF'
import sys, statistics as st
path, allocs = sys.argv[1], [a.split("=")[0] for a in sys.argv[2:]]
data = {}
for line in open(path):
    p, a, wall, rss = line.split()
    data.setdefault((p, a), []).append((float(wall), float(rss) / 1024))
progs = list(dict.fromkeys(k[0] for k in data))
for title, idx in (("wall time, seconds", 0), ("peak RSS, MiB", 1)):
    print(f"\n== {title} (median of runs); ratio = allocator / glibc")
    print(f"{'program':10}" + "".join(f"{a:>11}" for a in allocs) + "".join(f"{a + '/glibc':>16}" for a in allocs[1:]))
    for p in progs:
        med = {a: st.median(x[idx] for x in data[(p, a)]) for a in allocs}
        print(f"{p:10}" + "".join(f"{med[a]:11.2f}" for a in allocs)
              + "".join(f"{med[a] / med['glibc']:15.2f}x" for a in allocs[1:]))
EOF
