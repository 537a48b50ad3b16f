#!/usr/bin/env bash
# Thread-local-state probe: builds the probes with rustc and cc, counts
# instructions per access with callgrind, times every scheme in one
# interleaved run, and prints the tables and the hot instruction sequences.
# Results and method: docs/tls.md. Not part of any test or of the workspace.
#
# Environment (all optional):
#   TP_OUT      build/output dir (default: $CARGO_TARGET_DIR/tls-probe, else a
#               fresh temp dir)
#   TP_PROCS    timing processes, run one after another (default 3)
#   TP_ROUNDS   timing rounds per process (default 41)
#   TP_N        accesses per timed batch (default 1000000)
#   TP_CG_N     accesses per callgrind measurement (default 10000)
#   TP_SKIP_CG  set to 1 to skip callgrind
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
if [[ -n ${TP_OUT:-} ]]; then
    OUT=$TP_OUT
elif [[ -n ${CARGO_TARGET_DIR:-} ]]; then
    OUT=$CARGO_TARGET_DIR/tls-probe
else
    OUT=$(mktemp -d /tmp/tls-probe.XXXXXX)
fi
PROCS=${TP_PROCS:-3}
ROUNDS=${TP_ROUNDS:-41}
N=${TP_N:-1000000}
CG_N=${TP_CG_N:-10000}
mkdir -p "$OUT"
cd "$OUT"

# Functions and loop heads on 64-byte boundaries, so that no scheme wins or
# loses by where its few bytes happen to fall relative to fetch blocks.
RUSTC_FLAGS=(--edition 2024 -C opt-level=3 -C panic=abort -C debuginfo=0
    -C llvm-args=-align-all-functions=6 -C llvm-args=-align-all-nofallthru-blocks=6)
CFLAGS=(-O2 -Wall -falign-functions=64 -falign-loops=64)

echo "## build ($OUT)"
# Executable side: C probe (default PIE model, local-exec) + driver with the
# Rust probe compiled in.
cc "${CFLAGS[@]}" -fPIE -c "$HERE/probe.c" -DPLACE=exe -DSCHEME=le -DWITH_EXTRA -o probe_c_exe.o
rustc "${RUSTC_FLAGS[@]}" --crate-type bin --cfg 'place="exe"' \
    -C link-arg="$OUT/probe_c_exe.o" "$HERE/driver.rs" -o driver
# Shared-library side, twice: "dl" copies are dlopened, "pre" copies are
# LD_PRELOADed; distinct symbol names let both live in one process.
for P in dl pre; do
    cc "${CFLAGS[@]}" -fPIC -shared -ftls-model=global-dynamic -DPLACE=$P -DSCHEME=gd -DWITH_EXTRA \
        "$HERE/probe.c" -o libtp_c_gd_$P.so
    cc "${CFLAGS[@]}" -fPIC -shared -ftls-model=global-dynamic -mtls-dialect=gnu2 -DPLACE=$P -DSCHEME=desc \
        "$HERE/probe.c" -o libtp_c_desc_$P.so
    cc "${CFLAGS[@]}" -fPIC -shared -ftls-model=initial-exec -DPLACE=$P -DSCHEME=ie \
        "$HERE/probe.c" -o libtp_c_ie_$P.so
    rustc "${RUSTC_FLAGS[@]}" --crate-type cdylib --crate-name tp_rs_$P --cfg "place=\"$P\"" \
        "$HERE/probe.rs" -o libtp_rs_$P.so
done
export TP_DL_LIBS="$OUT/libtp_rs_dl.so:$OUT/libtp_c_gd_dl.so:$OUT/libtp_c_desc_dl.so:$OUT/libtp_c_ie_dl.so"
PRELOAD="$OUT/libtp_rs_pre.so $OUT/libtp_c_gd_pre.so $OUT/libtp_c_desc_pre.so $OUT/libtp_c_ie_pre.so"
drv() { LD_PRELOAD="$PRELOAD" ./driver "$@"; }

echo
echo "## machine"
awk -F': ' '/^model name/ {m = $2} /^cpu family/ {f = $2} /^model\t/ {md = $2}
    /^stepping/ {st = $2} /^cpu MHz/ {mhz = $2} /^processor/ {n++}
    END {printf "cpu: %s (family %s model %s stepping %s, %s MHz reported, %d cpus)\n", m, f, md, st, mhz, n}' /proc/cpuinfo
echo "kernel: $(uname -r)"
ldd --version | sed -n 1p
rustc --version
cc --version | sed -n 1p
date -u +%Y-%m-%dT%H:%M:%SZ

echo
echo "## perf check"
if perf stat -x, -e instructions:u true 2>&1 | grep -q 'not supported\|<not'; then
    echo "perf stat -e instructions:u: not supported here (no PMU in this VM); using callgrind"
else
    perf stat -x, -e instructions:u true 2>&1 | tail -1
fi

drv list > loops.txt

if [[ ${TP_SKIP_CG:-0} != 1 ]]; then
    echo
    echo "## callgrind: instructions per loop iteration ((Ir(2N) - Ir(N)) / N, N=$CG_N)"
    rm -rf cg && mkdir cg
    : > cg.tsv
    while read -r sym; do
        LD_PRELOAD="$PRELOAD" valgrind -q --tool=callgrind --collect-atstart=no \
            --toggle-collect="$sym" --dump-after="$sym" \
            --callgrind-out-file="cg/$sym.%p" ./driver count "$sym" "$CG_N" > /dev/null
        # Dumps: .1 warm-up, .2 N iterations, .3 2N iterations.
        a=$(awk '/^totals:/ {print $2}' cg/"$sym".*.2)
        b=$(awk '/^totals:/ {print $2}' cg/"$sym".*.3)
        awk -v s="$sym" -v a="$a" -v b="$b" -v n="$CG_N" 'BEGIN { printf "%s\t%.2f\n", s, (b - a) / n }' >> cg.tsv
    done < loops.txt
    cat cg.tsv
fi

echo
echo "## timing: $PROCS processes x $ROUNDS interleaved rounds of $N accesses per loop"
rm -f raw.*.tsv
for p in $(seq 1 "$PROCS"); do
    drv time "$ROUNDS" "$N" > raw.$p.tsv
    head -1 raw.$p.tsv
done

echo
echo "## table"
# Pooled over all rounds of all processes. Δns vs base: per round, minus the
# plain-global loop of the same place, language and operation. × rs_ie: per
# round, divided by smalloc's scheme (rs_ie) in the same place.
[[ -s cg.tsv ]] || : > cg.tsv
./driver summarize cg.tsv raw.*.tsv | tee table.md

echo
echo "## hot access sequences (objdump -d, Intel syntax, padding dropped)"
dis() {
    objdump -d -C --no-show-raw-insn -M intel "$1" |
        awk -v pat="$2" '$0 ~ "^[0-9a-f]+ <(" pat ")>:$" {p = 1} p && /^$/ {p = 0; print ""} p' |
        grep -Ev '[[:space:]](int3|nop( .*)?|xchg +ax,ax|(data16 )?cs nop.*)$'
}
echo "### executable (driver)"
dis driver 'driver::probe::(base|ie|std|tp)_(read|rw)|(base|word|pth)_(read|rw)'
echo "### libtp_rs_dl.so"
dis libtp_rs_dl.so 'tp_rs_dl::(base|ie|std|pth|tp)_(read|rw)'
for s in gd desc ie; do
    echo "### libtp_c_${s}_dl.so"
    dis libtp_c_${s}_dl.so "word_(read|rw)"
done
echo "### ld.so: __tls_get_addr fast path and the static-TLS TLSDESC resolver"
objdump -d --no-show-raw-insn -M intel "$(ldd ./driver | awk '/ld-linux/ {print $1}')" |
    awk '/<__tls_get_addr@@GLIBC_2.3>:/ {p = 1} p {print} p && /\tret/ {p = 0}'
echo "(the TLSDESC resolver for a module in static TLS is _dl_tlsdesc_return: mov rax,[rax+0x8]; ret)"
