#!/usr/bin/env bash
# bench_node_overhead -- seconds per iteration of two `lpgossip node`
# processes (a directed ring of 2 on 127.0.0.1, one BLAS thread each),
# resnet20, batch 32, `--compress topk:0.01+q8`, in three set-ups measured
# in one run, interleaved ROUNDS times, medians reported:
#   local   --no-gossip (the same processes, local SGD only)
#   plain   gossip, no security
#   curve   gossip with `security: curve` (keys from lpgossip keygen)
# and the ratios plain/local (goal <= 1.15) and curve/plain (goal <= 1.05).
#   bench/bench_node_overhead.sh [ITERATIONS (60)] [ROUNDS (5)] [BIN]
set -eu
iters=${1:-60}
rounds=${2:-5}
bin=${3:-build/lpgossip}
dir=$(mktemp -d /tmp/lpgossip-overhead-XXXXXX)
trap 'rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
"$bin" keygen "$dir/a" >/dev/null
"$bin" keygen "$dir/b" >/dev/null
ka=$(sed -n 's/.*public-key = "\(.*\)"/\1/p' "$dir/a")
kb=$(sed -n 's/.*public-key = "\(.*\)"/\1/p' "$dir/b")
subset=$((2 * 32 * iters))
run() { # $1 = local|plain|curve, $2 = output dir
    local mode=$1 out=$2 pa pb topo
    pa=$(port); pb=$(port)
    topo="$dir/$mode.yaml"
    { [ "$mode" = curve ] && echo "security: curve"
      echo "nodes:"
      echo "  - {id: a, endpoint: \"tcp://127.0.0.1:$pa\", key: '$ka'}"
      echo "  - {id: b, endpoint: \"tcp://127.0.0.1:$pb\", key: '$kb'}"
      echo "graph: {generator: directed_ring}"; } > "$topo"
    local extra=()
    [ "$mode" = local ] && extra=(--no-gossip)
    for r in 0 1; do
        local cert=()
        [ "$mode" = curve ] && cert=(--cert "$dir/$([ $r = 0 ] && echo a || echo b)_secret")
        "$bin" node --topology "$topo" --rank $r --model resnet20 --train-subset $subset \
            --batch 32 --epochs 1 --no-eval --compress topk:0.01+q8 --out "$out" \
            "${cert[@]}" "${extra[@]}" > "$out.log.$r" 2>&1 &
    done
    wait
    python3 - "$out" <<'PY'
import json, sys
s = []
for r in (0, 1):
    rows = [json.loads(l) for l in open("%s/metrics-%d.jsonl" % (sys.argv[1], r)) if l.strip()]
    s.append(rows[-1]["seconds"] / rows[-1]["iter"])
print("%.6f" % (sum(s) / 2))
PY
}
declare -A t
for k in $(seq "$rounds"); do
    for mode in local plain curve; do
        t[$mode]="${t[$mode]:-} $(run $mode "$dir/$mode-$k")"
    done
done
python3 - "${t[local]}" "${t[plain]}" "${t[curve]}" "$iters" <<'PY'
import statistics, sys
med = [statistics.median(float(x) for x in a.split()) for a in sys.argv[1:4]]
print("2 nodes, resnet20, batch 32, topk:0.01+q8, %s iterations, medians of %d rounds:"
      % (sys.argv[4], len(sys.argv[1].split())))
for name, v in zip(("local (--no-gossip)", "gossip, plaintext", "gossip, CURVE"), med):
    print("  %-22s %8.1f ms / iteration" % (name, 1000 * v))
print("ratio gossip/local  %.3f  (goal <= 1.15)" % (med[1] / med[0]))
print("ratio curve/plain   %.3f  (goal <= 1.05)" % (med[2] / med[1]))
PY
