#!/usr/bin/env bash
# Runs every test program of BUILD (default build) under valgrind memcheck
# (quick sizes: LPGOSSIP_QUICK=1): errors or definite leaks fail the
# program.  Child processes (lpgossip node/simulate) run natively.  Prints
# one line per program and "N clean, N with errors".
#   scripts/valgrind.sh [BUILD]
set -u
build=${1:-build}
command -v valgrind >/dev/null || { echo "valgrind: not installed"; exit 1; }
export OPENBLAS_NUM_THREADS=1 LPGOSSIP_QUICK=1 CMOCKA_MESSAGE_OUTPUT=stdout
clean=0; bad=0
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    log=$(mktemp)
    start=$(date +%s)
    timeout 3600 valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
        "$t" >"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    if [ $rc -eq 0 ]; then
        clean=$((clean + 1)); printf '%-28s clean (%ds)\n' "$name:" "$secs"
    else
        bad=$((bad + 1)); printf '%-28s status %d (%ds)\n' "$name:" "$rc" "$secs"
        grep -E '^==[0-9]+==' "$log" | head -20
    fi
    rm -f "$log"
done
echo "$clean clean, $bad with errors"
[ $bad -eq 0 ]
