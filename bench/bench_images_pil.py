#!/usr/bin/python3
"""Reads an ImageFolder tree the way `images:DIR` does (class folders
sorted, files sorted, every image decoded to a uint8 array, stacked), with
PIL and numpy.  Prints the seconds taken and the image count.

    /usr/bin/python3 bench/bench_images_pil.py DIR
"""
import os, sys, time
import numpy as np
from PIL import Image


def split(d):
    xs, ys = [], []
    for k, c in enumerate(sorted(e.name for e in os.scandir(d) if e.is_dir())):
        cd = os.path.join(d, c)
        for f in sorted(e.name for e in os.scandir(cd) if not e.name.startswith(".")):
            with Image.open(os.path.join(cd, f)) as im:
                xs.append(np.asarray(im))
            ys.append(k)
    return np.stack(xs), np.array(ys, np.uint8)


t = time.perf_counter()
tr = split(os.path.join(sys.argv[1], "train"))
te = split(os.path.join(sys.argv[1], "test"))
print("%.4f %d" % (time.perf_counter() - t, len(tr[0]) + len(te[0])))
