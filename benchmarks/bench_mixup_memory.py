"""Memory of mixing a small task into a big one over several epochs: MixupLoader vs a cache.

Two tasks of padded rows in memory, `big` 10x the examples of `small`, batch 32, 512 tokens
wide, so one small-task batch is 256 KiB of tensors and the whole small task ~40 MiB of batches.

- `mixup`: `MixupLoader(exhaust="cycle_to_longest")`: one batch of each task per step; a task
  that runs out starts a new pass (fresh shuffle), no batch is kept after its step.
- `itertools_cycle` (reference, the original MixupDataLoader's approach):
  `zip(big, itertools.cycle(small))` per epoch, merged with the same merge function. `cycle`
  keeps every batch of its first pass, so the small task's whole epoch of batches stays in memory
  (and repeats in the same order).

Each variant runs `--epochs` epochs in its own child process (so peaks do not mix); the table
gives, per epoch, the RSS at the end of the epoch and the process's peak RSS so far, both minus
the RSS after building the data (MiB). Prints one table and one JSON line.

    python benchmarks/bench_mixup_memory.py [--quick] [--epochs 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource

import numpy as np
import psutil
import torch
from harness import emit, parser, run_child, table
from torch.utils.data import DataLoader

from mtl.loaders import MixupLoader
from mtl.samplers import RandomBatchSampler

BATCH_SIZE, WIDTH = 32, 512


class Rows(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.input_ids = torch.randint(5, 30_000, (n, WIDTH), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> int:
        return i

    def __getitems__(self, indices: list[int]) -> list[int]:
        return indices

    def collate(self, indices: list[int]) -> dict[str, torch.Tensor]:
        idx = torch.tensor(indices)
        ids = self.input_ids[idx]  # a fresh copy per batch, as a real collate makes
        return {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "labels": self.labels[idx],
        }


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def child(variant: str, n_small: int, epochs: int) -> None:
    torch.set_num_threads(1)
    loaders = {}
    for seed, (name, n) in enumerate({"big": 10 * n_small, "small": n_small}.items()):
        ds = Rows(n, seed)
        sampler = RandomBatchSampler(np.full(n, WIDTH), BATCH_SIZE, seed=seed)
        loaders[name] = DataLoader(ds, batch_sampler=sampler, collate_fn=ds.collate)
    mixup = MixupLoader(loaders)
    proc = psutil.Process()
    base = proc.memory_info().rss / 2**20
    rows = []
    for epoch in range(epochs):
        if variant == "mixup":
            for _batch in mixup:
                pass
        else:
            pairs = zip(loaders["big"], itertools.cycle(loaders["small"]))
            for step, (a, b) in enumerate(pairs):
                mixup.combine(epoch, step, [(0, a), (1, b)])
        rows.append(
            {
                "epoch": epoch,
                "rss_end": proc.memory_info().rss / 2**20 - base,
                "peak": peak_mib() - base,
            }
        )
    print(json.dumps(rows))


def main() -> None:
    args = parser(__doc__, "small task of 500 rows, 2 epochs")
    args.add_argument("--epochs", type=int, default=5)
    args.add_argument("--child", choices=["mixup", "itertools_cycle"], help=argparse.SUPPRESS)
    args.add_argument("--n-small", type=int, default=5000)
    args = args.parse_args()
    n_small, epochs = (500, 2) if args.quick else (args.n_small, args.epochs)
    if args.child:
        child(args.child, n_small, epochs)
        return

    results = {
        variant: run_child([__file__, "--child", variant, "--n-small", str(n_small),
                            "--epochs", str(epochs)])
        for variant in ("mixup", "itertools_cycle")
    }  # fmt: skip
    small_task_mib = n_small * WIDTH * 8 * 2 / 2**20  # input_ids + attention_mask, int64
    print(f"small task: {n_small} rows, its batches ~{small_task_mib:.0f} MiB; big: {10 * n_small}")
    table(
        ["epoch", *(f"{v} {k}" for v in results for k in ("rss", "peak"))],
        [[e, *(results[v][e][k] for v in results for k in ("rss_end", "peak"))]
         for e in range(epochs)],
        1,
    )  # fmt: skip
    growth = {v: round(r[-1]["peak"] - r[0]["peak"], 1) for v, r in results.items()}
    print(f"peak growth epoch 0 -> {epochs - 1} (MiB): {growth}")
    figures = {
        "bench": "mixup_memory",
        "peer": "zip(big, itertools.cycle(small)), the original MixupDataLoader's cache",
        "n_small": n_small,
        "small_task_batches_mib": round(small_task_mib, 1),
        "per_epoch_mib": results,
        "peak_growth_mib": growth,
        "peak_mib": {v: round(r[-1]["peak"], 1) for v, r in results.items()},
    }
    emit(figures, args.json)


if __name__ == "__main__":
    main()
