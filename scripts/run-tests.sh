#!/usr/bin/env bash
# Runs every test program in BUILD/tests and sums cmocka's per-program counts.
# A program that dies without a cmocka summary counts as one failure.
# Last line: "N passed, N failed".
set -u
build=${1:-build}
export OPENBLAS_NUM_THREADS=1 CMOCKA_MESSAGE_OUTPUT=stdout
pass=0; fail=0; bad=""
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    out=$(timeout 600 "$t" 2>&1); rc=$?
    echo "$out" | grep -E '^\[  (FAILED|  OK  |PASSED) \]|^\[ (ERROR|  SKIP  ) \]|^\[ +(FAILED|PASSED) +\]|^\[==========\]' | sed "s/^/$name: /" | grep -v '  OK  ' || true
    p=$(echo "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    f=$(echo "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
    p=${p:-0}; f=${f:-0}
    if [ $rc -ne 0 ] && [ "$f" = 0 ]; then
        f=1; echo "$name: exited with status $rc without a cmocka summary"; echo "$out" | tail -20
    elif [ "$f" != 0 ]; then
        echo "$out" | grep -B2 -A8 -E '^\[  (FAILED|ERROR) ' | head -60
    fi
    pass=$((pass + p)); fail=$((fail + f))
    [ "$f" != 0 ] && bad="$bad $name"
done
[ -n "$bad" ] && echo "failing programs:$bad"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
