"""Padding efficiency of the batch samplers: real tokens / padded tokens, at batch size 32.

Compares `random` (the peer: plain shuffled batches) with `block_shuffle` at sort_bs_num
1, 10, 50, 100 and whole-epoch (None), on
- the token lengths of the bundled pydoc tasks (MiniLM tokenizer, max_length 256; train split),
- a synthetic long-tailed sample: lognormal lengths (median 40, sigma 0.8), clipped to [4, 512].
A batch costs `len(batch) * max(length in batch)` token slots; efficiency is the sum of real
lengths over the sum of slots, pooled over `--epochs` epochs. Only the samplers' batch lists and
the lengths are used (no tensors). Prints one table and one JSON line.

    python scripts/padding_efficiency.py [--epochs 5] [--synthetic-n 20000] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from mtl.samplers import BlockShuffleBatchSampler, RandomBatchSampler

SORT_BS_NUMS = (1, 10, 50, 100, None)


def efficiency(sampler: RandomBatchSampler | BlockShuffleBatchSampler, epochs: int) -> float:
    lengths = sampler.lengths
    real = slots = 0
    for epoch in range(epochs):
        for batch in sampler.epoch_batches(epoch):
            batch_lengths = lengths[batch]
            real += int(batch_lengths.sum())
            slots += len(batch) * int(batch_lengths.max())
    return real / slots


def pydoc_lengths() -> np.ndarray:
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    from mtl.data import build_task, load_tokenizer

    task = build_task(
        "pydoc_topic",
        type="sequence_classification",
        source={"bundled": "pydoc_topic"},
        tokenizer=load_tokenizer(),
        max_length=256,
    )
    return np.asarray(task.train["length"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5, help="epochs averaged (default 5)")
    parser.add_argument("--synthetic-n", type=int, default=20_000, help="synthetic sample size")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    synthetic = np.clip(rng.lognormal(np.log(40), 0.8, args.synthetic_n), 4, 512).astype(int)
    datasets = {"pydoc": pydoc_lengths(), "synthetic": synthetic}

    samplers = {
        "random": lambda lengths: RandomBatchSampler(lengths, args.batch_size, seed=args.seed)
    }
    for k in SORT_BS_NUMS:
        samplers[f"block_shuffle(sort_bs_num={k})"] = lambda lengths, k=k: BlockShuffleBatchSampler(
            lengths, args.batch_size, seed=args.seed, sort_bs_num=k
        )

    figures: dict[str, dict[str, float]] = {}
    for data_name, lengths in datasets.items():
        figures[data_name] = {
            name: round(efficiency(make(lengths), args.epochs), 4)
            for name, make in samplers.items()
        }

    stats = {
        name: f"n={len(x)} median={np.median(x):.0f} p95={np.percentile(x, 95):.0f} max={x.max()}"
        for name, x in datasets.items()
    }
    print(f"padding efficiency (real / padded tokens), batch size {args.batch_size}, ", end="")
    print(f"{args.epochs} epochs; " + "; ".join(f"{k}: {v}" for k, v in stats.items()))
    header = f"{'sampler':34s}" + "".join(f"{name:>12s}" for name in datasets)
    print(header + f"{'vs random':>12s}")
    for name in samplers:
        row = "".join(f"{figures[d][name]:12.3f}" for d in datasets)
        ratio = figures["pydoc"][name] / figures["pydoc"]["random"]
        print(f"{name:34s}{row}{ratio:11.2f}x")
    print(json.dumps({"batch_size": args.batch_size, "epochs": args.epochs, **figures}))


if __name__ == "__main__":
    main()
