#!/usr/bin/python3
"""Writes the reader fixtures of tests/test_nn_data_user.c with independent
tools: PIL for PNG/JPEG, numpy for .npz/.npy, Python's csv module for tables.
Expected values are written beside them as plain text (decoded by PIL /
numpy), so the C readers are checked against another implementation.
Seeded: run again, it writes the same contents (zip timestamps aside).

    /usr/bin/python3 tests/data/userdata/make_fixtures.py   (needs python3-numpy, python3-pil)
"""
import csv, io, os, shutil, zipfile
import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.RandomState(23)


def out(*p):
    path = os.path.join(HERE, *p)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


def expected(name, rows):
    with open(out(name), "w") as f:
        for r in rows:
            f.write(" ".join(str(int(v)) for v in r) + "\n")


# ---- image folders ------------------------------------------------------
# imgs: gray PNGs 5x6 and RGB JPEGs 5x6 mixed -> 3 channels (gray replicated).
# Classes deliberately not in creation order: 'zebra' < 'ant' is false.
for d in ("imgs", "imgs_gray"):
    shutil.rmtree(os.path.join(HERE, d), ignore_errors=True)
rows = []
for split, per in (("train", 3), ("test", 2)):
    for ci, cls in enumerate(("ant", "bee", "zebra")):
        for k in range(per):
            if (ci + k) % 2 == 0:
                a = rng.randint(0, 256, size=(5, 6), dtype=np.uint8)
                name = out("imgs", split, cls, "im%d.png" % k)
                Image.fromarray(a, "L").save(name)
            else:
                a = rng.randint(0, 256, size=(5, 6, 3), dtype=np.uint8)
                name = out("imgs", split, cls, "im%d.jpg" % k)
                Image.fromarray(a, "RGB").save(name, quality=90)
            px = np.asarray(Image.open(name).convert("RGB"), dtype=np.uint8)
            rows.append([0 if split == "train" else 1, ci] + list(px.transpose(2, 0, 1).ravel()))
        # gray-only set with an alpha-free 16-bit-free palette of PNGs
        for k in range(per):
            a = rng.randint(0, 256, size=(4, 3), dtype=np.uint8)
            Image.fromarray(a, "L").save(out("imgs_gray", split, cls, "g%d.png" % k))
expected("imgs_expected.txt", rows)
rows = []
for split, per in (("train", 3), ("test", 2)):
    for ci, cls in enumerate(("ant", "bee", "zebra")):
        for k in range(per):
            a = np.asarray(Image.open(out("imgs_gray", split, cls, "g%d.png" % k)))
            rows.append([0 if split == "train" else 1, ci] + list(a.ravel()))
expected("imgs_gray_expected.txt", rows)
# resize reference: a 4x4 ramp shrunk to 2x2 by area averaging is exact
ramp = np.arange(16, dtype=np.uint8).reshape(4, 4) * 16
Image.fromarray(ramp, "L").save(out("ramp4.png"))
# a truncated PNG and JPEG, a text file named like an image
png = open(out("imgs", "train", "ant", "im0.png"), "rb").read()
open(out("bad", "trunc.png"), "wb").write(png[: len(png) // 2])
jpg = open(out("imgs", "train", "ant", "im1.jpg"), "rb").read()
open(out("bad", "trunc.jpg"), "wb").write(jpg[: len(jpg) // 2])
open(out("bad", "notes.png"), "w").write("not an image\n")

# ---- npz ----------------------------------------------------------------
x8 = rng.randint(0, 256, size=(7, 4, 3, 2), dtype=np.uint8)   # N,H,W,C (Keras)
y8 = np.array([0, 1, 2, 1, 0, 2, 2], dtype=np.int64)
xt8 = rng.randint(0, 256, size=(3, 4, 3, 2), dtype=np.uint8)
yt8 = np.array([2, 0, 1], dtype=np.uint8)
np.savez(out("nhwc_u8.npz"), x_train=x8, y_train=y8, x_test=xt8, y_test=yt8)
np.savez_compressed(out("nhwc_u8_deflate.npz"), x_train=x8, y_train=y8, x_test=xt8, y_test=yt8)
expected("nhwc_u8_expected.txt",
         [[0, int(y8[i])] + list(x8[i].transpose(2, 0, 1).ravel()) for i in range(7)] +
         [[1, int(yt8[i])] + list(xt8[i].transpose(2, 0, 1).ravel()) for i in range(3)])
xf = (rng.randn(5, 2, 3, 3) * 100).astype(np.float32)             # N,C,H,W
xtf = (rng.randn(2, 2, 3, 3) * 100).astype(np.float32)
np.savez(out("nchw_f32.npz"), x_train=xf, y_train=np.array([1, 0, 1, 1, 0], np.int32),
         x_test=xtf, y_test=np.array([0, 1], np.int16))
with open(out("nchw_f32_expected.txt"), "w") as f:  # exact decimal of each float32
    for a in (xf, xtf):
        f.write(" ".join(repr(float(v)) for v in a.ravel()) + "\n")
g = rng.randint(0, 256, size=(4, 2, 2), dtype=np.uint8)
np.savez(out("nhw_u8.npz"), x_train=g, y_train=np.array([0, 3, 1, 2], np.uint8),
         x_test=g[:2], y_test=np.array([3, 0], np.uint8))
# malformed
np.savez(out("bad", "x_int16.npz"), x_train=g.astype(np.int16), y_train=np.zeros(4, np.uint8),
         x_test=g[:2], y_test=np.zeros(2, np.uint8))
np.savez(out("bad", "object.npz"), x_train=g, y_train=np.array([0, 1, "a", None], dtype=object),
         x_test=g[:2], y_test=np.zeros(2, np.uint8))
np.savez(out("bad", "fortran.npz"), x_train=np.asfortranarray(rng.randint(0, 9, (4, 3, 2)).astype(np.uint8)),
         y_train=np.zeros(4, np.uint8), x_test=g[:2], y_test=np.zeros(2, np.uint8))
np.savez(out("bad", "label300.npz"), x_train=g, y_train=np.array([0, 1, 300, 2], np.int64),
         x_test=g[:2], y_test=np.zeros(2, np.uint8))
np.savez(out("bad", "no_ytest.npz"), x_train=g, y_train=np.zeros(4, np.uint8), x_test=g[:2])
np.savez(out("bad", "bigendian.npz"), x_train=g.astype(">f4"), y_train=np.zeros(4, np.uint8),
         x_test=g[:2].astype(">f4"), y_test=np.zeros(2, np.uint8))
z = open(out("nhwc_u8_deflate.npz"), "rb").read()
open(out("bad", "trunc.npz"), "wb").write(z[: len(z) - 40])
np.save(out("bad", "pickle.npy"), np.array([{"a": 1}], dtype=object), allow_pickle=True)

# ---- csv ----------------------------------------------------------------
def write_csv(name, header, rows):
    with open(out(name), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)

species = ["setosa", "virginica", "versicolor"]
tr = [[round(float(v), 3) for v in rng.randn(3) * 10] + [species[i % 3]] for i in range(12)]
te = [[round(float(v), 3) for v in rng.randn(3) * 10] + [species[(i + 1) % 3]] for i in range(4)]
write_csv("iris_train.csv", ["sepal length", "sepal, width", "petal", "species"], tr)
write_csv("iris_test.csv", ["sepal length", "sepal, width", "petal", "species"], te)
num = [[i % 4, round(float(rng.rand()), 4), i * 2 - 5] for i in range(10)]
write_csv("num.csv", ["label", "a", "b"], num)
write_csv("bad/ragged.csv", ["a", "b", "label"], [[1, 2, 0], [3, 4], [5, 6, 1]])
write_csv("bad/text.csv", ["a", "b", "label"], [[1, 2, 0], [3, "abc", 1]])
write_csv("bad/missing.csv", ["a", "b", "label"], [[1, 2, 0], [3, "", 1], [1, 1, 1]])
write_csv("bad/unseen_test.csv", ["sepal length", "sepal, width", "petal", "species"],
          [[1, 2, 3, "rose"]])
