#!/usr/bin/env bash
# Builds every tests/fuzz/fuzz_*.c as a libFuzzer target (clang,
# -fsanitize=fuzzer,address,undefined, linked against the library sources)
# and runs each for SECONDS (default 20).  Seed corpus: tests/data/<target>/
# when present.  Prints executions per target; exits non-zero on a crash or
# build failure.  Without clang/libFuzzer: prints a skip line and exits 0.
#   scripts/fuzz.sh [SECONDS]
#   FUZZ_ONLY=fuzz_npy scripts/fuzz.sh 60     (only the targets named fuzz_npy*)
set -u
secs=${1:-20}
cd "$(dirname "$0")/.."
out=build/fuzz
CLANG=${CLANG:-clang}
skip() { echo "fuzz: skipped (clang with libFuzzer not available)"; exit 0; }
command -v "$CLANG" >/dev/null 2>&1 || skip
mkdir -p "$out/obj"
probe="$out/probe.c"
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n){(void)d;(void)n;return 0;}\n' > "$probe"
"$CLANG" -fsanitize=fuzzer "$probe" -o "$out/probe" >/dev/null 2>&1 || skip

PKGS="libczmq libzmq yaml-0.1 openblas zlib libpng libjpeg"
PKG_CFLAGS=$(pkg-config --cflags $PKGS 2>/dev/null)
PKG_LIBS=$(pkg-config --libs $PKGS 2>/dev/null)
SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
CFLAGS="-g -O1 -std=c11 -D_GNU_SOURCE -I. $PKG_CFLAGS -fno-omit-frame-pointer -fno-strict-aliasing"

# SIMD files by target, as the Makefile picks them
case "$("$CLANG" -dumpmachine 2>/dev/null)" in
    x86_64-*|i?86-*) simd_off="_neon.c _dotprod.c _i8mm.c _arm.c" ;;
    aarch64-*)       simd_off="_avx2.c _avx512bw.c _avx512.c _avx512bf16.c _amx.c _x86.c" ;;
    *)               simd_off="_neon.c _dotprod.c _i8mm.c _arm.c _avx2.c _avx512bw.c _avx512.c _avx512bf16.c _amx.c _x86.c" ;;
esac
# no dependency files: an object older than its source or than any header
# is rebuilt (a struct that grew would otherwise be read with its old layout)
newest_h=$(ls -t nn/*.h lowprec/*.h topology/*.h gossip/*.h node/*.h 2>/dev/null | head -1)
objs=()
for src in nn/*.c lowprec/*.c topology/*.c gossip/*.c node/node_modelfile.c; do
    [ -f "$src" ] || continue
    off=0
    for suffix in $simd_off; do
        case "$src" in *"$suffix") off=1 ;; esac
    done
    [ $off = 1 ] && continue
    extra=""
    case "$src" in
        *_dotprod.c) extra="-march=armv8.2-a+dotprod" ;;
        *_i8mm.c)   extra="-march=armv8.2-a+i8mm" ;;
        *_avx2.c)   extra="-mavx2 -mfma" ;;
        *_avx512bw.c) extra="-mavx2 -mfma -mavx512f -mavx512bw -mavx512vl" ;;
        *_avx512.c) extra="-mavx2 -mfma -mavx512f -mavx512bw -mavx512vl -mavx512vnni" ;;
        *_avx512bf16.c) extra="-mavx2 -mfma -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512bf16" ;;
        *_amx.c)    extra="-mavx2 -mfma -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mamx-tile -mamx-int8 -mamx-bf16" ;;
    esac
    obj="$out/obj/${src%.c}.o"
    mkdir -p "$(dirname "$obj")"
    if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ "$newest_h" -nt "$obj" ]; then
        "$CLANG" $CFLAGS $SAN $extra -c "$src" -o "$obj" || { echo "fuzz: build of $src failed"; exit 1; }
    fi
    objs+=("$obj")
done

status=0
for t in tests/fuzz/${FUZZ_ONLY:-fuzz_}*.c; do
    [ -f "$t" ] || continue
    name=$(basename "$t" .c)
    bin="$out/$name"
    "$CLANG" $CFLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        "$t" "${objs[@]}" -o "$bin" $PKG_LIBS -lm -lpthread || { echo "fuzz: $name: build failed"; status=1; continue; }
    corpus="$out/corpus/$name"
    mkdir -p "$corpus"
    seeds=()
    [ -d "tests/data/$name" ] && seeds+=("tests/data/$name")
    log="$out/$name.log"
    "$bin" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$out/$name-" \
        -rss_limit_mb=1024 "$corpus" "${seeds[@]}" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if [ $rc -ne 0 ]; then
        echo "fuzz: $name: FAILED (exit $rc) after ${execs:-?} executions; log $log"
        grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -10
        status=1
    else
        echo "fuzz: $name: ${execs:-?} executions in ${secs}s, no crash"
    fi
done
exit $status
