#!/usr/bin/env bash
# bench_stale.sh — one slow node: synchronous (--staleness 0) vs bounded
# staleness (--staleness S), Choco and SGP, int8 cnn, on 4 nodes (complete4)
# and 8 nodes (ring8), with scripts/run-local (--slow R:F).  Prints one
# Markdown table: per run the mean wall time of the OTHER nodes (the slow
# rank excluded; from each node's last metrics line, `seconds`), its ratio
# to the undisturbed synchronous run of the same configuration, the slow
# node's skipped steps, and the averaged model's accuracy.
#
#   bench/bench_stale.sh [S] [SUBSET] [EPOCHS]     (defaults 2 16000 1)
#   TOPOS="complete4 ring8" ALGOS="choco sgp" bench/bench_stale.sh
#
# The slow node is rank 1 at F = 1/3 (SLOW=R:F to change).  Runs are kept
# under runs/bench-stale/.  OPENBLAS_NUM_THREADS=1; on a 2-core machine the
# processes share the cores, so "undisturbed" is itself contended.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
S=${1:-2}
SUBSET=${2:-16000}
EPOCHS=${3:-1}
SLOW=${SLOW:-1:0.3333}
TOPOS=${TOPOS:-complete4 ring8}
ALGOS=${ALGOS:-choco sgp}
BIN=${BIN:-$here/build/lpgossip}
OUTDIR=${OUTDIR:-runs/bench-stale}
export OPENBLAS_NUM_THREADS=1
slow_rank=${SLOW%%:*}

flags_of() {
    case $1 in
    choco) echo "--algo choco --compress topk:0.01+q8" ;;
    sgp) echo "--algo sgp --compress q8" ;;
    esac
}

# run TOPO ALGO S SLOWSPEC(or -) -> prints "others_s slow_skipped acc"
run() {
    local topo=$1 algo=$2 s=$3 slow=$4 out
    out="$OUTDIR/$topo-$algo-s$s-$([ "$slow" = - ] && echo even || echo slow)"
    local extra=()
    [ "$slow" = - ] || extra=(--slow "$slow")
    # shellcheck disable=SC2046
    "$here/scripts/run-local" "topologies/$topo.yaml" --bin "$BIN" --out "$out" --quiet \
        $(flags_of "$algo") --precision int8 --model cnn --epochs "$EPOCHS" \
        --train-subset "$SUBSET" --no-eval --seed 1 --staleness "$s" "${extra[@]}" \
        > "$out.log" 2>&1 || { echo "run failed: see $out.log" >&2; echo "nan nan nan"; return; }
    python3 - "$out/summary.json" "$slow_rank" "$slow" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
r = int(sys.argv[2]); slow = sys.argv[3] != "-"
secs = [v for k, v in enumerate(s["node_seconds"]) if not (slow and k == r)]
sk = s["steps_skipped"][r] if slow else 0
print("%.2f %s %.4f %d" % (sum(secs) / len(secs), sk, s["avg_model_acc"], s["iterations"]))
PY
}

mkdir -p "$OUTDIR"
echo "| nodes | algo | S | slow node | others' wall (s) | vs undisturbed S=0 | slow node's skipped steps | iterations | averaged acc |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for topo in $TOPOS; do
    for algo in $ALGOS; do
        base=
        for s in 0 "$S"; do
            for slow in - "$SLOW"; do
                read -r secs sk acc iters < <(run "$topo" "$algo" "$s" "$slow")
                [ -n "$base" ] || base=$secs
                ratio=$(python3 -c "print('%.2fx' % ($secs / $base))" 2>/dev/null || echo "?")
                printf '| %s | %s | %s | %s | %s | %s | %s | %s | %.2f%% |\n' "$topo" "$algo" "$s" \
                    "$([ "$slow" = - ] && echo none || echo "rank $slow_rank at ${SLOW#*:}")" \
                    "$secs" "$ratio" "$sk" "$iters" "$(python3 -c "print(100 * $acc)")"
            done
        done
    done
done
