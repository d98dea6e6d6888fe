#!/usr/bin/env bash
# The checks to run when a GPU machine is lent (about 12 minutes on one H200, by estimate):
#   1. the test suite's GPU-marked tests (pytest -m gpu: packing under bf16, AMP training, compile)
#   2. benchmarks/bench_gpu.py: block_shuffle vs random on a BERT-base-sized encoder, fp32 vs bf16,
#      compile on vs off, packed vs padded mixup steps, LoRA vs the whole model, mtl vs a bare
#      PyTorch loop (eager and compiled) and mtl vs the HF Trainer (each tool in a process of its
#      own), side by side in one run, with each row's host ms per step, GPU busy share and MFU;
#      the table is appended to docs/benchmarks.md.
#
#   scripts/gpu_check.sh [--cpu] [--out PATH]
#
# --cpu: the benchmarks' pipeline at toy sizes on the CPU, in well under a minute: what CI runs
# (the GPU tests are not started: without CUDA each would skip; the test suite collects them).
# --out PATH: append the table to PATH instead of docs/benchmarks.md (--cpu writes nowhere unless
# given --out). Exits non-zero on the first failure.
set -euo pipefail

cd "$(dirname "$0")/.."
cpu=0
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cpu) cpu=1 ;;
    --out) out="${2:?--out needs a path}"; shift ;;
    *) echo "mtl: error: gpu_check.sh: unknown option $1; use [--cpu] [--out PATH]" >&2; exit 2 ;;
  esac
  shift
done
python="${PYTHON:-python}"

if [[ $cpu == 0 ]]; then
  if ! "$python" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "mtl: error: gpu_check.sh: no CUDA device here; run it on a GPU, or with --cpu" >&2
    exit 2
  fi
  out="${out:-docs/benchmarks.md}"
  echo "== GPU-marked tests" >&2
  # They live in one file (collecting the whole suite would take a minute).
  "$python" -m pytest -q -m gpu -p no:cacheprovider tests/training/test_gpu.py
fi

echo "== benchmarks side by side" >&2
bench=(benchmarks/bench_gpu.py)
[[ $cpu == 1 ]] && bench+=(--quick)
[[ -n $out ]] && bench+=(--markdown "$out")
"$python" "${bench[@]}"
