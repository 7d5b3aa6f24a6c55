#!/usr/bin/env bash
# stale-device -- one node held to a third of a CPU, with a core per node:
# an 8-node undirected ring, cnn, Choco top-1% + q8, an undisturbed run and
# a run with node 2 under `scripts/run-local --quota 2:0.33` (a cgroup CPU
# quota as root where the machine has a cpu controller, else a SIGSTOP /
# SIGCONT duty cycle: the summary says which), REPS times interleaved.
# Prints per repetition each node's wall time as a ratio of its undisturbed
# wall time and the averaged model's accuracy difference (points), then the
# medians.  Sized for a 16-core machine in under 4 minutes (one BLAS thread
# and one core per node); run from anywhere, paths are taken from the
# repository root:
#
#   bench/stale-device.sh LOGDIR [NODES (8)] [SUBSET (24000)] [EPOCHS (2)] [REPS (2)]
#
# e.g. `bench/stale-device.sh /tmp/sd 4 2000 1 1` as a quick check.  Needs
# python3 and build/lpgossip (built here with make if missing), or another
# binary in $LPGOSSIP_BIN; $NODE_FLAGS is added to every node's flags (e.g.
# NODE_FLAGS="--data fashion-mnist:DIR" where Debian's Fashion-MNIST is elsewhere).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 LOGDIR [NODES] [SUBSET] [EPOCHS] [REPS]" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
logs=$(cd "$1" && pwd)
nodes=${2:-8}; subset=${3:-24000}; epochs=${4:-2}; reps=${5:-2}
cd "$root"
bin=${LPGOSSIP_BIN:-build/lpgossip}
[ -x "$bin" ] || [ "$bin" != build/lpgossip ] || make -j"$(nproc)" >"$logs/make.log" 2>&1 \
    || { echo "stale-device: make failed, see $logs/make.log" >&2; exit 1; }
export OPENBLAS_NUM_THREADS=1
topo="$logs/ring$nodes.yaml"
printf 'description: %d-node undirected ring\nnodes: %d\ngraph: {generator: undirected_ring}\n' \
    "$nodes" "$nodes" >"$topo"
flags=(--model cnn --train-subset "$subset" --epochs "$epochs" --seed 1
       --compress topk:0.01+q8 --threads 1 --quiet --bin "$bin" ${NODE_FLAGS:-})
echo "stale-device: $nodes-node ring, $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), subset $subset, $epochs epochs, $reps reps; logs in $logs"
start=$(date +%s)
for r in $(seq 1 "$reps"); do
    scripts/run-local "$topo" "${flags[@]}" --out "$logs/even$r" >"$logs/even$r.log" 2>&1 \
        || { echo "stale-device: undisturbed run $r failed:" >&2; tail -5 "$logs/even$r.log" >&2; exit 1; }
    scripts/run-local "$topo" "${flags[@]}" --quota 2:0.33 --baseline "$logs/even$r" \
        --out "$logs/quota$r" >"$logs/quota$r.log" 2>&1 \
        || { echo "stale-device: quota run $r failed:" >&2; tail -5 "$logs/quota$r.log" >&2; exit 1; }
    echo "rep $r done after $(( $(date +%s) - start )) s"
done
python3 - "$logs" "$reps" <<'EOF'
import json, os, statistics, sys
logs, reps = sys.argv[1], int(sys.argv[2])
others, diffs = [], []
for r in range(1, reps + 1):
    s = json.load(open(os.path.join(logs, "quota%d" % r, "summary.json")))
    b = s["baseline"]
    q = s["quota"]
    o = [x for k, x in enumerate(b["wall_ratio"]) if k != q["rank"] and x is not None]
    others.append(sum(o) / len(o))
    diffs.append(b["acc_diff_points"])
    print("rep %d: node %d at %.2f of a CPU by %s" % (r, q["rank"], q["fraction"], q["mechanism"]))
    print("  wall ratio per node: %s" % ", ".join(
        "n%d %.2fx%s" % (k, x, " (quota)" if k == q["rank"] else "")
        for k, x in enumerate(b["wall_ratio"])))
    print("  undisturbed wall %s s; averaged model %.2f%% vs %.2f%%: %+.2f points" % (
        "/".join("%.1f" % x for x in b["node_seconds"]), 100 * s["avg_model_acc"],
        100 * b["avg_model_acc"], b["acc_diff_points"]))
print("median over %d reps: the others' mean wall ratio %.2fx (%s), accuracy %+.2f points (%s)"
      % (reps, statistics.median(others), ", ".join("%.2fx" % x for x in others),
         statistics.median(diffs), ", ".join("%+.2f" % x for x in diffs)))
EOF
echo "stale-device: $(( $(date +%s) - start )) s in all"
