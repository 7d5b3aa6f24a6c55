#!/usr/bin/env bash
# bench_metrics_overhead -- seconds per iteration of two `lpgossip node`
# processes (a directed ring of 2 on 127.0.0.1, one BLAS thread each, the
# cnn, batch 32, `--compress topk:0.01+q8`) without and with
# `--metrics-port`, the latter scraped every second (/metrics and /status
# of both nodes, as Prometheus and `lpgossip watch` would), interleaved
# ROUNDS times; prints the medians and the ratio on/off (goal <= 1.01), of
# wall time and of the nodes' own CPU time.
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
        /usr/bin/time -f "%U %S" -o "$out.cpu.$r" \
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
s, c = [], []
for r in (0, 1):
    rows = [json.loads(l) for l in open("%s/metrics-%d.jsonl" % (sys.argv[1], r)) if l.strip()]
    s.append(rows[-1]["seconds"] / rows[-1]["iter"])
    u, k = open("%s.cpu.%d" % (sys.argv[1], r)).read().split()[-2:]
    c.append((float(u) + float(k)) / rows[-1]["iter"])
print("%.6f:%.6f" % (sum(s) / 2, sum(c) / 2))
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
pairs = [[x.split(":") for x in a.split()] for a in sys.argv[1:3]]
off, on = ([float(w) for w, _ in p] for p in pairs)
coff, con = ([float(c) for _, c in p] for p in pairs)
print("2 nodes, cnn, batch 32, topk:0.01+q8, %s iterations, %d interleaved rounds:"
      % (sys.argv[3], len(off)))
print("  off  ms/iteration: " + " ".join("%.2f" % (1000 * v) for v in off))
print("  on   ms/iteration: " + " ".join("%.2f" % (1000 * v) for v in on))
mo, mn = statistics.median(off), statistics.median(on)
print("  medians: off %.2f ms, on (scraped every 1 s) %.2f ms" % (1000 * mo, 1000 * mn))
print("ratio on/off  %.4f  (goal <= 1.01)" % (mn / mo))
# the nodes' own CPU time (user + system, all threads, the HTTP thread's
# formatting included; the scraper is another process) is steadier than wall
# time on a shared machine
co, cn = statistics.median(coff), statistics.median(con)
print("  node CPU ms/iteration: off %s; on %s" % (" ".join("%.2f" % (1000 * v) for v in coff),
                                                 " ".join("%.2f" % (1000 * v) for v in con)))
print("CPU ratio on/off  %.4f  (medians %.2f / %.2f ms)" % (cn / co, 1000 * cn, 1000 * co))
PY
