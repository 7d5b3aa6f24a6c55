#!/usr/bin/env bash
# The default experiment behind `make run`: eight `lpgossip node` processes on
# this machine (the paper's directed ring), Choco-SGD with push-sum, real
# 8-bit training, top-1% sparsification + 8-bit values on the wire, the small
# cnn on Fashion-MNIST.  Sized for about 5-7 minutes on 2 cores; ends with the
# summary (averaged-model accuracy, bytes per node) and plots in runs/default.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-build/lpgossip}
out=${OUT:-runs/default}
export OPENBLAS_NUM_THREADS=1
exec "$here/run-local" topologies/ring8.yaml --bin "$bin" --out "$out" \
    --algo choco --compress topk:0.01+q8 --precision int8 --model cnn \
    --epochs "${EPOCHS:-5}" --eval-every 117 --seed 1
