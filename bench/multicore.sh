#!/usr/bin/env bash
# bench/multicore.sh — what a many-core x86 machine shows that a 2-core one
# cannot, in one call of about six minutes:
#   1. the CPU (model, cores, the SIMD and AMX flags);
#   2. the int8 unit tests at this CPU's top level, AMX where it has it
#      (LPGOSSIP_CPU=amx runs the tiles, not the tile model);
#   3. bench_precision (resnet20, cnn, mlp) at 1, 2, 4, 8 and 16 threads:
#      the thread scaling and the int8/FP32 ratio per level;
#   4. a node slowed to a third of a CPU (a cgroup quota where the machine
#      allows it) with a core per node: 4- and 8-node rings and complete
#      graphs, Choco top-1%+q8 and SGP (MC_CASES: c4 s4 c8 s8 k4 k4s k8
#      k8s; default c4 s4 c8), each against an undisturbed run; cases run
#      side by side while their nodes fit the cores;
#   5. 16 nodes on a 4x4 torus, a core each;
#   6. where perf runs (MC_PERF=path, sampling on the cpu-clock, which needs
#      no hardware counters): where the int8 step's time goes at 1 and 2
#      threads, per thread (from unstripped binaries: stripped ones give
#      addresses only).
# Every part writes under OUTDIR (default runs/multicore) and prints its
# figures; a part that fails says so and the next one runs.
#
# Usage (repository root, after `make -j`):
#   OPENBLAS_NUM_THREADS=1 bench/multicore.sh [OUTDIR] [parts, default 12345]
set -u
out=${1:-runs/multicore}
parts=${2:-12345}
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=1
b=build
has() { grep -qw "$1" /proc/cpuinfo; }
part() { case "$parts" in *"$1"*) return 0;; esac; return 1; }
say() { printf '\n== %s (%s)\n' "$*" "$(date -u +%T)"; }

levels="portable"
has avx2 && levels="$levels avx2"
has avx512f && levels="$levels avx512"
has avx512_vnni && levels="$levels avx512vnni"
has amx_int8 && levels="$levels amx"

if part 1; then
    say "CPU"
    lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L2|L3)' || true
    grep -o -m1 -wE 'avx2|avx512f|avx512_vnni|avx512_bf16|amx_tile|amx_int8|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' '
    echo; echo "levels: $levels"
    $b/lpgossip simulate --help >/dev/null 2>&1 || echo "lpgossip does not start here"
fi

if part 2; then
    say "int8 unit tests at the top level (the others run on any 2-core machine)"
    for lv in ${levels##* }; do
        for t in test_lowprec_tile test_lowprec_gemm test_lowprec_layers test_lowprec_ren \
                 test_lowprec_bf16 test_lowprec_quant test_lowprec_kern test_lowprec_model \
                 test_nn_pool; do
            [ -x $b/tests/$t ] || continue
            LPGOSSIP_CPU=$lv timeout 90 $b/tests/$t > "$out/$t.$lv.log" 2>&1
            printf '%-11s %-22s rc=%s %s\n' "$lv" "$t" "$?" \
                "$(grep -aE 'PASSED|FAILED' "$out/$t.$lv.log" | tr '\n' ' ' | cut -c1-80)"
        done
    done
fi

if part 3; then
    say "bench_precision, 1-16 threads"
    for m in ${MC_MODELS:-resnet20 cnn mlp}; do
        lvs=$levels
        [ $m = resnet20 ] || lvs=$(echo "$levels" | tr ' ' '\n' | grep -v portable | tr '\n' ' ')
        for lv in ${MC_LEVELS:-$lvs}; do
            timeout 120 $b/bench/bench_precision 5 ${MC_THREADS:-1,2,4,8,16} $m $lv 2>&1 | grep -v '^$' | tail -n +2
        done
    done | tee "$out/precision.txt"
fi

# run-local with its logs in $out/NAME; $1 = NAME, $2 = base port, the rest
# its flags.
s_run() {
    local name=$1 port=$2; shift 2
    scripts/run-local "$@" --base-port "$port" --quiet --out "$out/$name" \
        > "$out/$name.log" 2>&1 || echo "run $name failed (log $out/$name.log)"
}

if part 4; then
    say "a node at a third of a CPU, a core per node"
    B=${MC_SIZE:-"--model cnn --train-subset 8000 --epochs 3"}
    R4=results/slow-node/ring4-undirected.yaml
    R8=topologies/ring8-undirected.yaml
    K4=topologies/complete4.yaml
    K8=topologies/complete8.yaml
    C="--compress topk:0.01+q8"
    S="--algo dpsgd --compress q8"
    # case name: c = Choco top-1%+q8, s = SGP q8 on the 4- or 8-node ring,
    # k = complete graphs (k4, k8 Choco; k4s, k8s SGP).  Base port,
    # topology and flags of each:
    cases=${MC_CASES:-"c4 s4 c8"}
    s_case() {
        case $1 in
        c4) echo 21000 $R4 $C ;;
        s4) echo 21100 $R4 $S ;;
        c8) echo 21200 $R8 $C ;;
        s8) echo 21300 $R8 $S ;;
        k4) echo 21400 $K4 $C ;;
        k4s) echo 21500 $K4 $S ;;
        k8) echo 21600 $K8 $C ;;
        k8s) echo 21700 $K8 $S ;;
        *) echo "unknown case $1 (c4 s4 c8 s8 k4 k4s k8 k8s)" >&2; return 1 ;;
        esac
    }
    # cases run side by side while their nodes fit the cores (a core per
    # node), the next group after; $1 = b (undisturbed) or q (held node)
    cores=$(nproc)
    s_group() {
        local kind=$1 seed=$2 used=0 c n
        for c in $cases; do
            s_case $c > /dev/null || continue
            case $c in *8*) n=8 ;; *) n=4 ;; esac
            if [ $used -gt 0 ] && [ $((used + n)) -gt "$cores" ]; then wait; used=0; fi
            used=$((used + n))
            if [ $kind = b ]; then
                s_run ${c}b$seed $(s_case $c) $B --seed $seed &
            else
                s_run ${c}q$seed $(s_case $c) $B --seed $seed --quota 2:0.333 ${MC_QFLAGS:-} \
                    --baseline $out/${c}b$seed &
            fi
        done
        wait
    }
    for seed in ${MC_SEEDS:-1 2}; do
        s_group b $seed
        s_group q $seed
    done
    for f in "$out"/*q?/summary.md; do echo "--- $f"; cat "$f"; done 2>/dev/null |
        grep -E '^---|node flags|accuracy|wall time|CPU quota|against' | cut -c1-220
    grep -h "yielded" "$out"/*q?/log-*.txt 2>/dev/null | cut -c1-160
fi

if part 5; then
    say "16 nodes, 4x4 torus"
    s_run t16 22000 topologies/torus4x4.yaml --model cnn --train-subset 16000 --epochs 2 --compress topk:0.01+q8
    cat "$out/t16/summary.md" 2>/dev/null | grep -vE '^\s*$|png' | head -40
fi
if part 6; then
    say "where the int8 step's time goes (perf, cpu-clock)"
    perf=${MC_PERF:-perf}
    lv=${levels##* }
    for t in 1 2; do
        BENCH_ONLY=int8 LPGOSSIP_CPU=$lv $perf record -q -e cpu-clock -F 4000 -o "$out/perf$t.data" \
            $b/bench/bench_precision 8 $t resnet20 $lv > /dev/null 2>&1 || { echo "perf record failed"; break; }
        echo "--- resnet20 int8 at $lv, $t thread(s): share of samples by thread and function"
        $perf report -i "$out/perf$t.data" --no-children --sort pid,sym --stdio 2>/dev/null |
            grep -v '^#' | grep -v '^$' | head -40
    done
fi
say "done"
