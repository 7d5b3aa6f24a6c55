#!/usr/bin/python3
"""Writes an ImageFolder tree of small PNGs from the Fashion-MNIST IDX files
of the Debian package dataset-fashion-mnist (or a --idx DIR): DIR/train/
CLASS/NNNNN.png for the 60,000 training images, DIR/test/CLASS/NNNNN.png
for the first --test of the 10,000 test images.  PNGs are written by PIL.

    /usr/bin/python3 bench/make_image_folder.py /tmp/lpg_fashion_png [--test 1000]
"""
import argparse, gzip, os
import numpy as np
from PIL import Image

NAMES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
         "bag", "ankle-boot"]


def idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        b = f.read()
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--idx", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--test", type=int, default=1000)
    a = ap.parse_args()
    for split, pre, n in (("train", "train", None), ("test", "t10k", a.test)):
        x = idx(os.path.join(a.idx, pre + "-images-idx3-ubyte.gz"))
        y = idx(os.path.join(a.idx, pre + "-labels-idx1-ubyte.gz"))
        n = len(x) if n is None else n
        for c in NAMES:
            os.makedirs(os.path.join(a.out, split, c), exist_ok=True)
        for i in range(n):
            Image.fromarray(x[i], "L").save(os.path.join(a.out, split, NAMES[y[i]], "%05d.png" % i))


if __name__ == "__main__":
    main()
