#!/usr/bin/env bash
# bench_metrics_overhead -- seconds per iteration of two `lpgossip node`
# processes (a directed ring of 2 on 127.0.0.1, one BLAS thread each, the
# cnn, batch 32, `--compress topk:0.01+q8`) without and with
# `--metrics-port`, the latter scraped every second (/metrics and /status
# of both nodes, as Prometheus and `lpgossip watch` would), interleaved
# ROUNDS times; prints the medians and the ratio on/off (goal <= 1.01).
#   bench/bench_metrics_overhead.sh [ITERATIONS (150)] [ROUNDS (5)] [BIN]
set -eu
iters=${1:-150}
rounds=${2:-5}
bin=${3:-build/lpgossip}
dir=$(mktemp -d /tmp/lpgossip-metrics-XXXXXX)
trap 'rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
subset=$((2 * 32 * iters))
run() { # $1 = off|on, $2 = output dir
    local mode=$1 out=$2 pa pb ma mb topo
    pa=$(port); pb=$(port); ma=$(port); mb=$(port)
    topo="$dir/$mode.yaml"
    { echo "nodes:"
      echo "  - {id: a, endpoint: \"tcp://127.0.0.1:$pa\"}"
      echo "  - {id: b, endpoint: \"tcp://127.0.0.1:$pb\"}"
      echo "graph: {generator: directed_ring}"; } > "$topo"
    local r mp pids=() scraper=
    for r in 0 1; do
        local extra=()
        mp=$([ $r = 0 ] && echo "$ma" || echo "$mb")
        [ "$mode" = on ] && extra=(--metrics-port "$mp")
        "$bin" node --topology "$topo" --rank $r --model cnn --train-subset $subset \
            --batch 32 --epochs 1 --no-eval --compress topk:0.01+q8 --out "$out" \
            "${extra[@]}" > "$out.log.$r" 2>&1 &
        pids+=($!)
    done
    if [ "$mode" = on ]; then
        ( while :; do for p in "$ma" "$mb"; do
              curl -s -m 2 "http://127.0.0.1:$p/metrics" >/dev/null || true
              curl -s -m 2 "http://127.0.0.1:$p/status" >/dev/null || true
          done; sleep 1; done ) &
        scraper=$!
    fi
    wait "${pids[@]}" || true
    if [ -n "$scraper" ]; then kill "$scraper"; wait "$scraper" 2>/dev/null || true; fi
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
    for mode in off on; do
        t[$mode]="${t[$mode]:-} $(run $mode "$dir/$mode-$k")"
    done
done
python3 - "${t[off]}" "${t[on]}" "$iters" <<'PY'
import statistics, sys
off, on = ([float(x) for x in a.split()] for a in sys.argv[1:3])
print("2 nodes, cnn, batch 32, topk:0.01+q8, %s iterations, %d interleaved rounds:"
      % (sys.argv[3], len(off)))
print("  off  ms/iteration: " + " ".join("%.2f" % (1000 * v) for v in off))
print("  on   ms/iteration: " + " ".join("%.2f" % (1000 * v) for v in on))
mo, mn = statistics.median(off), statistics.median(on)
print("  medians: off %.2f ms, on (scraped every 1 s) %.2f ms" % (1000 * mo, 1000 * mn))
print("ratio on/off  %.4f  (goal <= 1.01)" % (mn / mo))
PY
