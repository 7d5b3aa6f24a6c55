"""lpgexp -- runs grids of `lpgossip simulate` configurations for the
experiment scripts (scripts/repro, scripts/compare).

Each configuration is one `simulate` run (the exact algorithm code of
`lpgossip node`, all nodes in one process, deterministic).  Its result --
every metrics line, the wall time and the command -- is cached as JSON in a
directory keyed by the command line, so an interrupted grid resumes where
it stopped and an unchanged configuration is never run twice.  Runs go
WORKERS at a time (default 2, one per core), each with
OPENBLAS_NUM_THREADS=1.

A configuration with a "fingerprint" (the arithmetic it must be made with,
see `lpgossip version`) is a stored result instead: keyed by the command
line relative to the repository and the fingerprint (so results made in
another clone or on another machine with the same arithmetic count, and
results of other arithmetic never do), and written with the machine, the
date and the fingerprint, small enough to keep in git.
"""
import hashlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def key_of(cmd):
    return hashlib.sha1("\0".join(cmd).encode()).hexdigest()[:16]


def relative(args):
    """args with paths inside the repository written relative to it."""
    return [a[len(ROOT) + 1:] if a.startswith(ROOT + os.sep) else a for a in args]


def result_path(cache, binary, c):
    """Where configuration c's result lives (see the module's comment)."""
    if "fingerprint" in c:
        key = key_of(["simulate"] + relative(c["args"]) + ["fingerprint=" + c["fingerprint"]] +
                     [_file_digest(c["args"][i + 1]) for i, a in enumerate(c["args"][:-1])
                      if a == "--topology"])
    else:
        key = key_of([binary, "simulate"] + c["args"])
    return os.path.join(cache, key + ".json")


def _file_digest(path):
    """The topology file's bytes are part of a stored result's identity."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha1(f.read()).hexdigest()[:16]
    except OSError:
        return "missing:" + path


def version_of(binary):
    """`lpgossip version --json` of binary: protocol, arith, wgrad, cpu_level."""
    out = subprocess.run([binary, "version", "--json"], capture_output=True, text=True,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if out.returncode != 0:
        sys.exit("lpgexp: %s version failed: %s" % (binary, out.stderr.strip()))
    return json.loads(out.stdout)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def _stamp(res, c, binary):
    """Adds what a stored result must say about how it was made."""
    if "fingerprint" not in c:
        return res
    v = version_of(binary)
    res.update({"args": relative(c["args"]), "cmd": ["lpgossip", "simulate"] +
                relative(c["args"]), "fingerprint": c["fingerprint"],
                "cpu_level": v.get("cpu_level"), "cpu": cpu_model(),
                "cores": len(os.sched_getaffinity(0)),
                "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())})
    return res


def read_jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    rows.append(json.loads(line))
    except (OSError, ValueError):
        pass
    return rows


def run_grid(configs, cache, binary=None, workers=2, log=print, keep_going=False):
    """configs: list of dicts with 'name' and 'args' (simulate flags, the
    topology included).  Returns {name: result} with result = {'name',
    'args', 'rows' (metrics lines), 'final' (last line), 'seconds'}.
    A failed run stops the grid, unless keep_going: then its result has
    'failed' (the exit status) and 'log_tail', the other runs go on, and
    it is cached only when the run itself reported divergence (a
    deterministic outcome; anything else is retried next time)."""
    binary = binary or os.path.join(ROOT, "build", "lpgossip")
    if not os.access(binary, os.X_OK):
        sys.exit("lpgexp: %s is not built (run make)" % binary)
    os.makedirs(cache, exist_ok=True)
    results, todo = {}, []
    for c in configs:
        cmd = [binary, "simulate"] + c["args"]
        path = result_path(cache, binary, c)
        if os.path.exists(path):
            with open(path) as f:
                results[c["name"]] = json.load(f)
        else:
            todo.append((c, cmd, path))
    if todo:
        log("lpgexp: %d of %d runs cached, %d to run, %d at a time"
            % (len(configs) - len(todo), len(configs), len(todo), workers))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    running, t_start = [], time.time()
    try:
        while todo or running:
            while todo and len(running) < workers:
                c, cmd, path = todo.pop(0)
                metrics = path[:-5] + ".jsonl"
                if os.path.exists(metrics):
                    os.remove(metrics)
                logf = open(path[:-5] + ".log", "w")
                full = cmd + ["--metrics", metrics]
                p = subprocess.Popen(full, stdout=logf, stderr=subprocess.STDOUT, env=env)
                running.append((c, full, path, metrics, logf, p, time.time()))
                log("lpgexp: started %s" % c["name"])
            time.sleep(0.5)
            still = []
            for item in running:
                c, full, path, metrics, logf, p, t0 = item
                if p.poll() is None:
                    still.append(item)
                    continue
                logf.close()
                if p.returncode != 0:
                    with open(path[:-5] + ".log", errors="replace") as f:
                        tail = "".join(f.readlines()[-5:])
                    if not keep_going:
                        sys.exit("lpgexp: %s failed (status %d):\n%s"
                                 % (c["name"], p.returncode, tail))
                    res = {"name": c["name"], "args": c["args"], "cmd": full,
                           "rows": read_jsonl(metrics), "final": {}, "failed": p.returncode,
                           "log_tail": tail, "seconds": round(time.time() - t0, 1)}
                    if "diverged" in tail:
                        with open(path, "w") as f:
                            json.dump(_stamp(res, c, binary), f)
                    results[c["name"]] = res
                    log("lpgexp: FAILED %s (status %d): %s" % (c["name"], p.returncode,
                                                               tail.strip().splitlines()[-1:]))
                    continue
                rows = read_jsonl(metrics)
                res = {"name": c["name"], "args": c["args"], "cmd": full, "rows": rows,
                       "final": rows[-1] if rows else {}, "seconds": round(time.time() - t0, 1)}
                with open(path, "w") as f:
                    json.dump(_stamp(res, c, binary), f)
                for tmp in (metrics, path[:-5] + ".log"):
                    if "fingerprint" in c and os.path.exists(tmp):
                        os.remove(tmp)
                results[c["name"]] = res
                fin = res["final"]
                log("lpgexp: done %s in %.0f s: averaged model %.2f%%, %.2f MB sent per node "
                    "(%.0f s elapsed)" % (c["name"], res["seconds"],
                                          100 * fin.get("avg_model_acc", 0),
                                          fin.get("bytes_sent_per_node", 0) / 1e6,
                                          time.time() - t_start))
            running = still
    except BaseException:
        # interrupted (Ctrl-C) or stopped by a failure: no run outlives the grid
        for item in running:
            if item[5].poll() is None:
                item[5].terminate()
                item[5].wait()
        raise
    return results


def bytes_to_reach(rows, acc):
    """Bytes per node when the averaged model first reached `acc` (linear
    between evaluations), or None."""
    prev_b, prev_a = 0.0, 0.0
    for r in rows:
        a, b = r.get("avg_model_acc", 0), r.get("bytes_sent_per_node", 0)
        if a >= acc:
            if a == prev_a:
                return b
            return prev_b + (b - prev_b) * (acc - prev_a) / (a - prev_a)
        prev_b, prev_a = b, a
    return None


def gnuplot(png, title, xlabel, ylabel, series, logx=False, errorbars=False, extra=()):
    """series: list of (label, [(x, y), ...]), or with errorbars of
    (label, [(x, y, dy), ...]); extra: more gnuplot commands (ranges,
    tics).  Returns png, or None when gnuplot is missing."""
    datas = []
    for i, (label, pts) in enumerate(series):
        d = png + ".%d.dat" % i
        with open(d, "w") as f:
            for pt in pts:
                f.write(" ".join("%g" % v for v in pt) + "\n")
        datas.append((label, d))
    script = ["set terminal pngcairo size 900,560 noenhanced" if _has_cairo() else
              "set terminal png size 900,560 noenhanced",
              "set output '%s'" % png, "set title '%s'" % title, "set xlabel '%s'" % xlabel,
              "set ylabel '%s'" % ylabel, "set key bottom right", "set grid"]
    if logx:
        script.append("set logscale x")
    script += list(extra)
    style = "yerrorlines" if errorbars else "linespoints"
    script.append("plot " + ", ".join("'%s' with %s title '%s'" % (d, style, l.replace("'", ""))
                                      for l, d in datas))
    try:
        p = subprocess.run(["gnuplot"], input="\n".join(script), text=True,
                           capture_output=True)
    except OSError:
        return None
    finally:
        for _, d in datas:
            os.remove(d)
    return png if p.returncode == 0 else None


def _has_cairo():
    try:
        p = subprocess.run(["gnuplot", "-e", "set terminal"], capture_output=True, text=True)
        return "pngcairo" in (p.stdout + p.stderr)
    except OSError:
        return False
