#!/usr/bin/env bash
# Runs every test program in BUILD/tests (from the repository root) and
# scripts/link-shaper --self-check, and sums cmocka's per-program counts:
# one line per program, details of failures, and last the line
# "N passed, N failed".  A program that dies without a
# cmocka summary (crash, sanitizer report, timeout) counts as one failure.
set -u
build=${1:-build}
export OPENBLAS_NUM_THREADS=1 CMOCKA_MESSAGE_OUTPUT=stdout
pass=0; fail=0; bad=""
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    start=$(date +%s%N)
    out=$(timeout 600 "$t" 2>&1); rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    p=$(echo "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    f=$(echo "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    p=${p:-0}; f=${f:-0}
    if [ $rc -ne 0 ] && [ "$f" = 0 ]; then
        f=1
        echo "$name: exited with status $rc without a cmocka summary; last output:"
        echo "$out" | tail -25
    elif [ "$f" != 0 ]; then
        echo "$out" | grep -E '^\[  (FAILED|ERROR) |ERROR|error|Failure' | head -40
    fi
    echo "$out" | grep -E '^\[  SKIPPED \]' | sed "s/^/$name: /" | head -5
    printf '%-28s %3d passed, %d failed  (%d.%01ds)\n' "$name:" "$p" "$f" $((ms / 1000)) $((ms % 1000 / 100))
    pass=$((pass + p)); fail=$((fail + f))
    [ "$f" != 0 ] && bad="$bad $name"
done
# scripts/link-shaper (run-local --link without netem): pace within 10%
# both ways, a ping >= 2 x delay, loss held back (about 12 s, loopback)
start=$(date +%s%N)
out=$(timeout 120 python3 scripts/link-shaper --self-check 2>&1); rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
if [ $rc -eq 0 ]; then p=1; f=0; else p=0; f=1; echo "$out" | tail -8; bad="$bad link-shaper"; fi
printf '%-28s %3d passed, %d failed  (%d.%01ds)\n' "link-shaper --self-check:" "$p" "$f" $((ms / 1000)) $((ms % 1000 / 100))
pass=$((pass + p)); fail=$((fail + f))
[ -n "$bad" ] && echo "failing programs:$bad"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
