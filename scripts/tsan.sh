#!/usr/bin/env bash
# The threaded code under ThreadSanitizer: builds build/tsan/ (make
# SANITIZE=thread) and runs the worker pool's tests and training steps of the
# built-in models at 2 and 3 threads at every kernel level this CPU has
# (bench_precision: FP32 and int8, forward and backward, the SGD update).
# Prints one line per run and exits non-zero on any report.
#   scripts/tsan.sh            cnn and mlp (about 3 minutes on 2 cores)
#   TSAN_MODELS="cnn mlp resnet20" scripts/tsan.sh
set -u
cd "$(dirname "$0")/.."
b=build/tsan
# Can ThreadSanitizer run here?  (Kernels with 32 bits of mmap randomness
# stop it at start-up; without address randomization it runs.)
mkdir -p $b
printf 'int main(void){return 0;}\n' >$b/probe.c
${CC:-cc} -fsanitize=thread $b/probe.c -o $b/probe 2>/dev/null ||
    { echo "tsan: skipped (the compiler cannot build with -fsanitize=thread)"; exit 0; }
wrap=""
if ! $b/probe >/dev/null 2>&1; then
    if setarch "$(uname -m)" -R $b/probe >/dev/null 2>&1; then
        wrap="setarch $(uname -m) -R"
    else
        echo "tsan: skipped (ThreadSanitizer cannot start on this kernel: $($b/probe 2>&1 | head -1))"
        exit 0
    fi
fi
make --no-print-directory -j2 SANITIZE=thread BUILD=$b $b/tests/test_nn_pool \
    $b/bench/bench_precision >/tmp/lpgossip-tsan-build.log 2>&1 ||
    { tail -30 /tmp/lpgossip-tsan-build.log; echo "tsan: build failed"; exit 1; }
export OPENBLAS_NUM_THREADS=1 \
    TSAN_OPTIONS="suppressions=$PWD/scripts/tsan.supp halt_on_error=0 exitcode=66"
bad=0 runs=0
# run NAME CMD...: one program; its reports are counted from its output
run() {
    local name=$1 log; shift
    log=/tmp/lpgossip-tsan-$name.log
    $wrap "$@" >"$log" 2>&1
    local rc=$? n; n=$(grep -c '^WARNING: ThreadSanitizer' "$log")
    runs=$((runs + 1))
    printf 'tsan %-24s rc %d, %d reports\n' "$name" "$rc" "$n"
    if [ "$rc" != 0 ] || [ "$n" != 0 ]; then
        bad=$((bad + 1)); grep -A12 '^WARNING: ThreadSanitizer' "$log" | head -40
    fi
}
run pool $b/tests/test_nn_pool
for m in ${TSAN_MODELS:-cnn mlp}; do
    run "step-$m" $b/bench/bench_precision 1 2,3 "$m"
done
echo "tsan: $runs runs, $bad with reports or failures"
[ "$bad" = 0 ]
