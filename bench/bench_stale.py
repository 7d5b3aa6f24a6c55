#!/usr/bin/env python3
"""bench_stale.py — one slow node: synchronous (--staleness 0) vs bounded
staleness, Choco and SGP, int8 cnn, on 4 nodes (complete4) and 8 nodes
(ring8), with scripts/run-local --slow R:F.  Prints one Markdown table with
the medians over REPS interleaved repetitions:

  others' wall   mean wall time of the nodes other than the slow rank (each
                 node's last metrics line, `seconds`: the training loop,
                 start barrier excluded)
  vs S=0 even    its ratio to the undisturbed synchronous run of the same
                 nodes and algorithm (the goal: <= 1.2 with one slow
                 node; <= 1.05 for S > 0 with equal speeds)
  others' wait   of that, the mean seconds their rounds waited (sending and
                 waiting, `seconds_wait`): less sensitive than wall time to
                 other load on the machine
  skipped        the slow node's catch-up mix-only iterations
  acc            the averaged model's test accuracy (run-local's summary)
  to target      with --eval-every N: the wall time at which the others'
                 models reach --target test accuracy (per node the first
                 crossing, linearly interpolated between evaluations, then
                 the median over the nodes other than the slow rank; "-"
                 when some node never reaches it), and the iteration at
                 which they do (the same way; independent of the load on
                 the machine).  Evaluation time counts in the wall time,
                 alike in every row.

    bench/bench_stale.py [--s 0,2,4] [--reps 2] [--subset 32000] [--epochs 1]
                         [--topos complete4,ring8] [--algos choco,sgp]
                         [--slow 1:0.3333] [--bin build/lpgossip] [--report-only]
                         [--eval-every N --target 0.85]

Runs stay under runs/bench-stale/.  OPENBLAS_NUM_THREADS=1; on a machine
with fewer cores than nodes the processes share the cores, so the
undisturbed run is itself contended and a sleeping slow node frees CPU for
the others.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = {"choco": ["--algo", "choco", "--compress", "topk:0.01+q8"],
         "sgp": ["--algo", "sgp", "--compress", "q8"]}


def run(a, topo, algo, s, slow, rep):
    out = os.path.join(a.out, "%s-%s-s%d-%s-r%d" % (topo, algo, s, "slow" if slow else "even", rep))
    cmd = [os.path.join(ROOT, "scripts", "run-local"), "topologies/%s.yaml" % topo, "--bin", a.bin,
           "--out", out, "--quiet"] + FLAGS[algo] + [
           "--precision", "int8", "--model", "cnn", "--epochs", str(a.epochs),
           "--train-subset", str(a.subset), "--seed", "1", "--staleness", str(s)]
    cmd += ["--eval-every", str(a.eval_every)] if a.eval_every else ["--no-eval"]
    if slow:
        cmd += ["--slow", a.slow]
    with open(out + ".log", "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT,
                             env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if rc != 0:
        print("run failed (%d): see %s.log" % (rc, out), file=sys.stderr)
        return None
    return measure(out, int(a.slow.split(":")[0]), slow, a.target)


def crossing(lines, target, key="seconds"):
    """The `key` (seconds, iter) at which test_acc first reaches target
    (interpolated), or None."""
    prev = (0.0, 0.0)
    for m in lines:
        acc = m.get("test_acc")
        if acc is None:
            continue
        if acc >= target:
            t0, a0 = prev
            return t0 + (m[key] - t0) * (target - a0) / (acc - a0) if acc > a0 else m[key]
        prev = (m[key], acc)
    return None


def measure(out, r, slow, target=None):
    """The numbers of one finished run directory."""
    sm = json.load(open(os.path.join(out, "summary.json")))
    last, cross, icross = [], [], []
    for k in range(len(sm["node_seconds"])):
        with open(os.path.join(out, "metrics-%d.jsonl" % k)) as f:
            lines = [json.loads(v) for v in f.read().strip().splitlines()]
        last.append(lines[-1])
        if target and not (slow and k == r):
            cross.append(crossing(lines, target))
            icross.append(crossing(lines, target, "iter"))
    others = [m for k, m in enumerate(last) if not (slow and k == r)]
    to_target = None
    iters_to_target = None
    if cross and None not in cross:
        to_target = statistics.median(cross)
        iters_to_target = statistics.median(icross)
    return {"others": sum(m["seconds"] for m in others) / len(others), "to_target": to_target,
            "iters_to_target": iters_to_target,
            "wait": sum(m["seconds_wait"] for m in others) / len(others),
            "skipped": sm["steps_skipped"][r] or 0, "acc": sm["avg_model_acc"],
            "iters": sm["iterations"]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--s", default="0,2,4")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--subset", type=int, default=32000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--topos", default="complete4,ring8")
    p.add_argument("--algos", default="choco,sgp")
    p.add_argument("--slow", default="1:0.3333")
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "lpgossip"))
    p.add_argument("--out", default="runs/bench-stale")
    p.add_argument("--eval-every", type=int, default=0,
                   help="evaluate every N iterations (for the time to --target)")
    p.add_argument("--target", type=float, default=0.85,
                   help="test accuracy for the time-to-target column")
    p.add_argument("--report-only", action="store_true",
                   help="only print the table of the runs already in --out")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    svals = [int(v) for v in a.s.split(",")]
    configs = [(t, al, s, sl) for t in a.topos.split(",") for al in a.algos.split(",")
               for s in svals for sl in (False, True)]
    res = {c: [] for c in configs}
    for rep in range(a.reps):
        for c in configs:
            d = os.path.join(a.out, "%s-%s-s%d-%s-r%d" % (c[0], c[1], c[2],
                                                          "slow" if c[3] else "even", rep))
            if a.report_only:
                m = measure(d, int(a.slow.split(":")[0]), c[3], a.target) if os.path.exists(
                    os.path.join(d, "summary.json")) else None
            else:
                m = run(a, *c, rep)
            if m:
                res[c].append(m)
                print("rep %d %s: %s" % (rep, c, m), file=sys.stderr, flush=True)
    tt = ("others' time to %.1f%% (s) | vs S=0 even | iterations to it | " % (100 * a.target)
          if a.eval_every else "")
    print("| nodes | algo | S | slow node | others' wall (s) | vs S=0 even | %sothers' wait (s) | slow node's skipped steps | iterations | averaged acc | runs |" % tt)
    print("| --- " * (14 if tt else 11) + "|")
    for c in configs:
        t, al, s, sl = c
        ms = res[c]
        base = res.get((t, al, 0, False)) or []
        if not ms:
            print("| %s | %s | %d | %s | not run or failed | | | | | | 0 |" % (
                t, al, s, a.slow if sl else "none"))
            continue
        med = statistics.median(m["others"] for m in ms)
        bmed = statistics.median(m["others"] for m in base) if base else float("nan")
        ttc = ""
        if a.eval_every:
            tv = [m["to_target"] for m in ms]
            bv = [m["to_target"] for m in base]
            tmed = statistics.median(tv) if None not in tv else None
            bt = statistics.median(bv) if bv and None not in bv else None
            iv = [m.get("iters_to_target") for m in ms]
            ttc = "%s | %s | %s | " % (
                "%.1f (%s)" % (tmed, ", ".join("%.1f" % v for v in tv)) if tmed else
                "not reached (%s)" % ", ".join("-" if v is None else "%.1f" % v for v in tv),
                "%.2fx" % (tmed / bt) if tmed and bt else "",
                "%.0f" % statistics.median(iv) if None not in iv else "")
        print("| %s | %s | %d | %s | %.1f (%s) | %.2fx | %s%.1f | %s | %d | %.2f%% | %d |" % (
            t, al, s, "rank %s at %s" % tuple(a.slow.split(":")) if sl else "none", med,
            ", ".join("%.1f" % m["others"] for m in ms), med / bmed, ttc,
            statistics.median(m["wait"] for m in ms),
            "/".join(str(m["skipped"]) for m in ms), ms[0]["iters"],
            100 * statistics.median(m["acc"] for m in ms), len(ms)))


if __name__ == "__main__":
    main()
