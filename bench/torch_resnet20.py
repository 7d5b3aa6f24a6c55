#!/usr/bin/python3
"""PyTorch twin of bench/bench_train_step.c: ms per resnet20 training step
(forward, cross-entropy, backward, SGD Nesterov update) for the same
architecture (EvoNorm-S0, the module in tests/fixtures/make_resnet20_golden.py),
batch and thread count.  Prints one line: "ms_per_step <median ms>".

    /usr/bin/python3 bench/torch_resnet20.py --input 3x32x32 --threads 1
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
from make_resnet20_golden import ResNet20  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", default="3x32x32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_default_dtype(torch.float32)
    c, h, w = (int(v) for v in a.input.split("x"))
    torch.manual_seed(0)
    model = ResNet20(c, 10).float()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True,
                          weight_decay=1e-4)
    x = torch.randn(a.batch, c, h, w)
    y = torch.randint(0, 10, (a.batch,))
    times = []
    for i in range(a.steps + 3):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    print("ms_per_step %.3f" % (1000 * statistics.median(times)))


if __name__ == "__main__":
    main()
