#!/usr/bin/env bash
# The default experiment behind `make run`.
# Today: a short single-node FP32 training run of the small cnn on
# Fashion-MNIST, then `lpgossip eval` of the saved model.
set -eu
bin=${1:-build/lpgossip}
out=${OUT:-runs/default}
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=1
rm -f "$out/metrics.jsonl"
"$bin" train --model cnn --data fashion-mnist --epochs "${EPOCHS:-2}" --batch 32 --lr 0.05 \
    --seed 1 --metrics "$out/metrics.jsonl" --save "$out/model.safetensors"
"$bin" eval "$out/model.safetensors"
echo "metrics: $out/metrics.jsonl   model: $out/model.safetensors"
