#!/usr/bin/env bash
# mca-arm — static throughput of the ARM inner loops (llvm-mca): the int8
# shift GEMM on UDOT (lp_gemm_dotprod.c) and on UMMLA (lp_gemm_i8mm.c)
# against the FP32 shift GEMM on FMLA (nn_conv_neon.c), as the aarch64
# cross build compiles them (scripts/cross aarch64 build first).
#
#   bench/mca-arm.sh [cpu ...]   default: neoverse-n1 cortex-a76 neoverse-n2 neoverse-v1
#
# For each kernel the innermost loop holding its multiply instructions is
# cut from the object file (objdump), its branches dropped, and fed to
# llvm-mca; the line per kernel and CPU gives instructions and cycles per
# iteration and cycles per 1000 channel MACs (one code times one code, or
# one float times one float).  MACs per multiply instruction: FMLA 4 (4
# outputs x 1 channel), UDOT 8 (4 outputs x a pair lane), UMMLA 16 (2x2
# outputs x two K steps of pair lanes).  A CPU without the extension (neoverse-n1, cortex-a76: no I8MM)
# is still modelled by llvm-mca with -mattr (a what-if: those CPUs cannot
# run UMMLA).
set -eu
cd "$(dirname "$0")/.."
cpus=${*:-neoverse-n1 cortex-a76 neoverse-n2 neoverse-v1}
obj=build/aarch64/obj
# the newest llvm-mca: LLVM 16 has scheduling models of neoverse-n2 and -v1
# (LLVM 14 models them as neoverse-n1)
mca=$(ls /usr/bin/llvm-mca-* 2>/dev/null | sort -V | tail -1)
mca=${mca:-$(command -v llvm-mca || true)}
[ -n "$mca" ] || { echo "mca-arm: llvm-mca missing (apt-get install -y llvm)" >&2; exit 1; }
for f in lowprec/lp_gemm_dotprod lowprec/lp_gemm_i8mm nn/nn_conv_neon; do
    [ -f "$obj/$f.o" ] || { echo "mca-arm: no $obj/$f.o (scripts/cross aarch64 build)" >&2; exit 1; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# innermost (shortest) backward-branch loop of symbol $2 in object $1 that
# holds instructions matching $3, as assembly without branches
s_loop() {
    aarch64-linux-gnu-objdump -d --no-show-raw-insn "$1" | python3 -c '
import re, sys
sym, pat = sys.argv[1], re.compile(sys.argv[2])
ins, cur = [], None
for line in sys.stdin:
    m = re.match(r"^[0-9a-f]+ <(.*)>:", line)
    if m: cur = m.group(1); continue
    m = re.match(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$", line)
    if m and cur == sym: ins.append((int(m.group(1), 16), m.group(2), m.group(3)))
best = None
for i, (a, op, args) in enumerate(ins):
    t = re.search(r"\b([0-9a-f]+) <", args)
    if op == "b" or not op.startswith(("b.", "cb", "tb")) or not t or int(t.group(1), 16) >= a: continue
    body = [x for x in ins if int(t.group(1), 16) <= x[0] <= a]
    n = sum(1 for x in body if pat.match(x[1]))
    if n and (best is None or len(body) < len(best[1])):
        best = (n, body)
if best is None: sys.exit("no loop with " + sys.argv[2] + " in " + sym)
for a, op, args in best[1]:
    if re.match(r"^(b|b\..*|cbn?z|tbn?z)$", op): continue
    print("\t" + op + " " + re.sub(r"\s*//.*", "", args))
' "$2" "$3"
}

s_loop $obj/lowprec/lp_gemm_dotprod.o lp_shiftgemm_dotprod '^udot$' >"$tmp/dotprod.s" 2>/dev/null ||
    s_loop $obj/lowprec/lp_gemm_dotprod.o s_tile16 '^udot$' >"$tmp/dotprod.s"
s_loop $obj/lowprec/lp_gemm_i8mm.o lp_shiftgemm_i8mm '^ummla$' >"$tmp/i8mm.s" 2>/dev/null ||
    s_loop $obj/lowprec/lp_gemm_i8mm.o s_tile16 '^ummla$' >"$tmp/i8mm.s"
s_loop $obj/nn/nn_conv_neon.o nn_neon_shiftgemm '^fmla$' >"$tmp/fp32.s" 2>/dev/null ||
    s_loop $obj/nn/nn_conv_neon.o s_gemm_tile '^fmla$' >"$tmp/fp32.s"

echo "$("$mca" --version | grep -i 'llvm version' | sed 's/^ *//')"
printf '%-12s %-8s %6s %6s %7s %8s %9s\n' cpu kernel insns mults cyc/it MACs/it cyc/kMAC
for cpu in $cpus; do
    for k in fp32:fmla:4 dotprod:udot:8 i8mm:ummla:16; do
        IFS=: read -r name op macs <<<"$k"
        out=$("$mca" -mtriple=aarch64 -mcpu="$cpu" -mattr=+dotprod,+i8mm -iterations=200 \
            "$tmp/$name.s" 2>/dev/null) || { printf '%-12s %-8s llvm-mca failed\n' "$cpu" "$name"; continue; }
        cyc=$(sed -n 's/^Total Cycles: *//p' <<<"$out")
        n=$(grep -cv '^\s*$' "$tmp/$name.s"); m=$(grep -c "^\s$op " "$tmp/$name.s")
        awk -v c="$cpu" -v k="$name" -v n="$n" -v m="$m" -v cyc="$cyc" -v per="$macs" 'BEGIN {
            it = cyc / 200; printf "%-12s %-8s %6d %6d %7.2f %8d %9.2f\n", c, k, n, m, it, per * m, 1000 * it / (per * m) }'
    done
done
[ -n "${MCA_KEEP:-}" ] && cp "$tmp"/*.s "$MCA_KEEP"/
exit 0
