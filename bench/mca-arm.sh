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

# the backward-branch loop of symbol $2 in object $1 densest in instructions
# matching $3 (the shortest of equals: the innermost), as assembly without
# branches; with a 4th
# argument an unconditional branch back closes a loop too
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
    back = op.startswith(("b.", "cb", "tb")) or (op == "b" and len(sys.argv) > 3)
    if not back or not t or int(t.group(1), 16) >= a: continue
    body = [x for x in ins if int(t.group(1), 16) <= x[0] <= a]
    n = sum(1 for x in body if pat.match(x[1]))
    if n and (best is None or n * len(best[1]) > best[0] * len(body) or
              (n * len(best[1]) == best[0] * len(body) and len(body) < len(best[1]))):
        best = (n, body)
if best is None: sys.exit("no loop with " + sys.argv[2] + " in " + sym)
for a, op, args in best[1]:
    if re.match(r"^(b|b\..*|cbn?z|tbn?z)$", op): continue
    print("\t" + op + " " + re.sub(r"\s*//.*", "", args))
' "$2" "$3" ${4:+"$4"}
}

s_loop $obj/lowprec/lp_gemm_dotprod.o lp_shiftgemm_dotprod '^udot$' >"$tmp/dotprod.s" 2>/dev/null ||
    s_loop $obj/lowprec/lp_gemm_dotprod.o s_tile16 '^udot$' >"$tmp/dotprod.s"
s_loop $obj/lowprec/lp_gemm_i8mm.o lp_shiftgemm_i8mm '^ummla$' >"$tmp/i8mm.s" 2>/dev/null ||
    s_loop $obj/lowprec/lp_gemm_i8mm.o s_tile16p '^ummla$' >"$tmp/i8mm.s"
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

# The element kernels: the ARM levels' NEON rows against the portable
# level's kernels they replace (what the ARM levels ran before), cycles
# per element.  Elements per loop iteration: the matched instructions
# times the elements each handles (a 4-lane FDIV or FMLS: 4; FCVTN/FCVTN2:
# 2; a scalar FCVT: 1).  The portable fused fake-quantizer is one loop for
# codes, values and the add (s_sr_lanes, closed by an unconditional
# branch): its body holds every path, an upper bound.
echo
printf '%-12s %-22s %6s %7s %6s %8s\n' cpu kernel insns cyc/it elts cyc/elt
rows="ren_fwd_blk:lp_norm_blk:lp_ren_row_fwd_blk:fdiv:4
ren_fwd_neon:lp_norm_neon:lp_ren_row_fwd_neon:fmls:4
ren_bwd_blk:lp_norm_blk:lp_ren_row_bwd_blk:fdiv:4
ren_bwd_neon:lp_norm_neon:lp_ren_row_bwd_neon:fmls:4
fake_quant_sr_blk:lp_quant_blk:s_sr_lanes:fdiv:4:b
fake_quant_sr_neon:lp_quant_neon:lp_fake_quant_sr_neon:fdiv:4
fq_sr_add_neon:lp_quant_neon:lp_fake_quant_sr_add_neon:fdiv:4
dequant_row_ref:lp_gemm:lp_dequant_row_ref:fcvt:1
dequant_row_neon:lp_gemm_neon:s_dequant_row:fcvtn2?:2"
for row in $rows; do
    IFS=: read -r name f sym op per b <<<"$row"
    [ -f "$obj/lowprec/$f.o" ] || { echo "mca-arm: no $obj/lowprec/$f.o" >&2; exit 1; }
    s_loop "$obj/lowprec/$f.o" "$sym" "^$op\$" $b >"$tmp/$name.s" 2>/dev/null ||
        { printf '%-12s %-22s no loop found\n' - "$name"; continue; }
done
for cpu in $cpus; do
    for row in $rows; do
        IFS=: read -r name f sym op per b <<<"$row"
        [ -s "$tmp/$name.s" ] || continue
        out=$("$mca" -mtriple=aarch64 -mcpu="$cpu" -iterations=200 "$tmp/$name.s" 2>/dev/null) ||
            { printf '%-12s %-22s llvm-mca failed\n' "$cpu" "$name"; continue; }
        cyc=$(sed -n 's/^Total Cycles: *//p' <<<"$out")
        n=$(grep -cv '^\s*$' "$tmp/$name.s"); m=$(grep -cE "^\s$op " "$tmp/$name.s")
        awk -v c="$cpu" -v k="$name" -v n="$n" -v m="$m" -v cyc="$cyc" -v per="$per" 'BEGIN {
            it = cyc / 200; printf "%-12s %-22s %6d %7.2f %6d %8.3f\n", c, k, n, it, per * m, it / (per * m) }'
    done
done
[ -n "${MCA_KEEP:-}" ] && cp "$tmp"/*.s "$MCA_KEEP"/
exit 0
