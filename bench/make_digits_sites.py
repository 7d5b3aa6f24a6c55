#!/usr/bin/python3
"""Writes the per-site image folders of the 4-node check in docs/data.md
from scikit-learn's bundled copy of the UCI optical digits (1,797 8x8
images, python3-sklearn): a stratified 80/20 train/test split (seeded),
the training images dealt at random over SITES sites of equal size, each
site's test images likewise, PNGs written by PIL (values 0..16 scaled to
0..255), the same classes.txt in every folder.  OUT/all holds everything
(the one-node baseline).

    /usr/bin/python3 bench/make_digits_sites.py OUT [SITES=4] [ALPHA]

With ALPHA the training images of each class are dealt over the sites in
proportions drawn from Dir(ALPHA) (numpy, seeded) instead: sites of
different sizes, each with most of a few classes (test images stay dealt
at random, so every site tests every class).
"""
import os, shutil, sys
import numpy as np
from PIL import Image
from sklearn.datasets import load_digits


def write(root, xs, ys):
    for c in range(10):
        for s in ("train", "test"):
            os.makedirs(os.path.join(root, s, "digit%d" % c), exist_ok=True)
    with open(os.path.join(root, "classes.txt"), "w") as f:
        f.write("".join("digit%d\n" % c for c in range(10)))
    for s, (x, y) in (("train", (xs[0], ys[0])), ("test", (xs[1], ys[1]))):
        for i in range(len(x)):
            Image.fromarray(x[i], "L").save(os.path.join(root, s, "digit%d" % y[i], "%04d.png" % i))


def main():
    out, sites = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4
    alpha = float(sys.argv[3]) if len(sys.argv) > 3 else 0
    shutil.rmtree(out, ignore_errors=True)
    d = load_digits()
    x = np.clip(np.round(d.images * 255.0 / 16.0), 0, 255).astype(np.uint8)
    y = d.target.astype(np.uint8)
    rng = np.random.RandomState(2023)
    tr, te = [], []
    for c in range(10):
        idx = rng.permutation(np.where(y == c)[0])
        k = int(round(0.8 * len(idx)))
        tr += list(idx[:k])
        te += list(idx[k:])
    tr, te = rng.permutation(tr), rng.permutation(te)
    write(os.path.join(out, "all"), (x[tr], x[te]), (y[tr], y[te]))
    ntr, nte = len(tr) // sites, len(te) // sites
    parts = [tr[s * ntr:(s + 1) * ntr] for s in range(sites)]
    if alpha > 0:
        parts = [[] for _ in range(sites)]
        for c in range(10):
            idx = [i for i in tr if y[i] == c]
            cut = (np.cumsum(rng.dirichlet([alpha] * sites)) * len(idx)).astype(int)
            for s, part in enumerate(np.split(np.array(idx), cut[:-1])):
                parts[s] += list(part)
        parts = [rng.permutation(p) for p in parts]
    for s in range(sites):
        a, b = np.array(parts[s], dtype=int), te[s * nte:(s + 1) * nte]
        write(os.path.join(out, "site%d" % s), (x[a], x[b]), (y[a], y[b]))
    print("%d train / %d test images; %d sites of %s train / %d test" %
          (len(tr), len(te), sites, ", ".join(str(len(p)) for p in parts), nte))


if __name__ == "__main__":
    main()
