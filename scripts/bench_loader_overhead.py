"""Per-batch overhead of the composite loaders over three in-memory tasks.

Every row iterates the same three per-task DataLoaders (pre-tokenized, padded tensors in memory,
RandomBatchSampler of 32, a collate that only indexes tensors, so the loaders themselves are
cheap and any overhead shows), and reports microseconds per task batch drawn:

- `sequential`, `round_robin`, `random` (each_once) and `mixup` (cycle_to_longest) beside
  `by_hand`: the same DataLoaders iterated in a plain loop in the same order as the loader's
  schedule (for mixup: one batch of each task per step, cycling, merged with pad + cat +
  row permutation, the same work the merge must do);
- peers, optional imports: Lightning `CombinedLoader` in mode `sequential` (beside our
  sequential) and `max_size_cycle` (one batch of each task per step, no merge; beside a by-hand
  zip of cycling iterators), and HF datasets `interleave_datasets` over the tasks pre-batched
  with `Dataset.batch(32)` (random task per step, probabilities by size; beside our random).

Timing: one torch thread (intra-op thread wake-ups on a small shared machine made the merge
10x noisier); every row runs once per round, rows interleaved, `--rounds` rounds after one warm-up
round; the best round counts. Prints one table and one JSON line (ratios to by-hand: goal <= 1.05).

    python scripts/bench_loader_overhead.py [--quick] [--rounds 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
import warnings
from collections.abc import Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from mtl.loaders import MixupLoader, RandomLoader, RoundRobinLoader, SequentialLoader
from mtl.samplers import RandomBatchSampler

BATCH_SIZE = 32
TASKS = {"big": (30_000, 64), "mid": (20_000, 48), "small": (10_000, 32)}  # (examples, width)


class Rows(Dataset):
    """Padded token rows in memory; `__getitems__` hands the index list straight to collate."""

    def __init__(self, n: int, width: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.input_ids = torch.randint(5, 30_000, (n, width), generator=g)
        lengths = torch.randint(4, width + 1, (n,), generator=g)
        self.attention_mask = (torch.arange(width) < lengths[:, None]).long()
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> int:
        return i

    def __getitems__(self, indices: list[int]) -> list[int]:
        return indices

    def collate(self, indices: list[int]) -> dict[str, torch.Tensor]:
        idx = torch.tensor(indices)
        return {
            "input_ids": self.input_ids[idx],
            "attention_mask": self.attention_mask[idx],
            "labels": self.labels[idx],
        }


def make_loaders(scale: float) -> dict[str, DataLoader]:
    loaders = {}
    for seed, (name, (n, width)) in enumerate(TASKS.items()):
        ds = Rows(int(n * scale), width, seed)
        sampler = RandomBatchSampler(np.full(len(ds), width), BATCH_SIZE, seed=seed)
        loaders[name] = DataLoader(ds, batch_sampler=sampler, collate_fn=ds.collate)
    return loaders


def by_hand(loaders: dict[str, DataLoader], schedule: np.ndarray) -> Iterator:
    """One fresh iterator per task (new pass when used up) read in the order of `schedule`."""
    names = list(loaders)
    iters = [iter(loaders[n]) for n in names]
    for t in schedule.tolist():
        try:
            yield next(iters[t])
        except StopIteration:
            iters[t] = iter(loaders[names[t]])
            yield next(iters[t])


def by_hand_zip(loaders: dict[str, DataLoader], steps: int) -> Iterator:
    cycles = [
        itertools.chain.from_iterable(iter(dl) for _ in itertools.count())
        for dl in loaders.values()
    ]
    for _ in range(steps):
        yield [next(c) for c in cycles]


def by_hand_mixup(loaders: dict[str, DataLoader], steps: int) -> Iterator:
    for step, batches in enumerate(by_hand_zip(loaders, steps)):
        width = max(b["input_ids"].shape[1] for b in batches)
        perm = torch.from_numpy(
            np.random.default_rng([0, 0, step]).permutation(sum(len(b["labels"]) for b in batches))
        )
        yield {
            key: torch.cat([F.pad(b[key], (0, width - b[key].shape[1])) for b in batches])[perm]
            for key in ("input_ids", "attention_mask")
        } | {"labels": torch.cat([b["labels"] for b in batches])[perm]}


def lightning_rows(loaders: dict[str, DataLoader]) -> dict[str, Callable[[], Iterator]] | str:
    try:
        from lightning.pytorch.utilities import CombinedLoader
    except ImportError:
        return 'lightning not installed: pip install -e ".[bench]"'

    def combined(mode: str) -> Callable[[], Iterator]:
        def run() -> Iterator:
            loader = CombinedLoader(loaders, mode)
            iter(loader)
            return (batch for batch, _, _ in loader)

        return run

    return {
        "lightning_sequential": combined("sequential"),
        "lightning_max_size_cycle": combined("max_size_cycle"),
    }


def hf_interleave_row(loaders: dict[str, DataLoader]) -> Callable[[], Iterator] | str:
    try:
        from datasets import Dataset as HFDataset
        from datasets import disable_progress_bars, interleave_datasets
    except ImportError:
        return 'datasets not installed: pip install -e ".[bench]"'
    disable_progress_bars()
    batched = []
    for dl in loaders.values():
        ds = dl.dataset
        table = {
            "input_ids": ds.input_ids.tolist(),
            "attention_mask": ds.attention_mask.tolist(),
            "labels": ds.labels.tolist(),
        }
        batched.append(HFDataset.from_dict(table).shuffle(seed=0).batch(BATCH_SIZE))
    sizes = np.array([len(b) for b in batched], dtype=float)
    mixed = interleave_datasets(
        batched,
        probabilities=(sizes / sizes.sum()).tolist(),
        seed=0,
        stopping_strategy="all_exhausted",
    ).with_format("torch")

    def run() -> Iterator:
        return iter(mixed)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tasks 50x smaller, 1 round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    warnings.filterwarnings("ignore")  # Lightning's pytree deprecation notice
    torch.set_num_threads(1)  # as in a DataLoader worker; 2 threads on a busy 2-core box jitter 10x
    loaders = make_loaders(0.02 if args.quick else 1.0)

    ours = {
        "sequential": SequentialLoader(loaders, shuffle_tasks=False),
        "round_robin": RoundRobinLoader(loaders),
        "random": RandomLoader(loaders),
        "mixup": MixupLoader(loaders),
    }
    steps = {name: len(loader) for name, loader in ours.items()}
    per_step = {name: 1 for name in ours} | {"mixup": len(loaders)}
    rows: dict[str, Callable[[], Iterator]] = {}
    pairs: dict[str, str] = {}  # row -> the by-hand row it is compared with
    for name, loader in ours.items():
        if name == "mixup":
            rows["by_hand_mixup"] = lambda: by_hand_mixup(loaders, steps["mixup"])
        else:
            schedule = loader.schedule(0)
            rows[f"by_hand_{name}"] = lambda s=schedule: by_hand(loaders, s)
        rows[name] = lambda loader=loader: iter(loader)
        pairs[name] = f"by_hand_{name}"
    rows["by_hand_zip"] = lambda: by_hand_zip(loaders, steps["mixup"])
    steps |= {f"by_hand_{n}": steps[n] for n in ours} | {"by_hand_zip": steps["mixup"]}
    per_step |= {f"by_hand_{n}": per_step[n] for n in ours} | {"by_hand_zip": len(loaders)}

    skipped = []
    lightning = lightning_rows(loaders)
    if isinstance(lightning, str):
        skipped.append(lightning)
        print(lightning)
    else:
        rows |= lightning
        steps |= {
            "lightning_sequential": steps["sequential"],
            "lightning_max_size_cycle": steps["mixup"],
        }
        per_step |= {"lightning_sequential": 1, "lightning_max_size_cycle": len(loaders)}
        pairs |= {
            "lightning_sequential": "by_hand_sequential",
            "lightning_max_size_cycle": "by_hand_zip",
        }
    hf = hf_interleave_row(loaders)
    if isinstance(hf, str):
        skipped.append(hf)
        print(hf)
    else:
        rows["hf_interleave"] = hf
        steps["hf_interleave"] = None  # its own length (all_exhausted oversamples small tasks)
        per_step["hf_interleave"] = 1
        pairs["hf_interleave"] = "by_hand_random"

    best: dict[str, float] = {}
    drawn: dict[str, int] = {}
    for round_index in range(rounds + 1):  # round 0 warms up (imports, first calls): not kept
        for name, make in rows.items():
            count = 0
            t0 = time.perf_counter()
            for _batch in make():
                count += 1
            seconds = time.perf_counter() - t0
            drawn[name] = count * per_step[name]
            if round_index:
                best[name] = min(best.get(name, float("inf")), seconds / drawn[name])

    us = {name: best[name] * 1e6 for name in rows}
    ratio = {name: round(us[name] / us[ref], 3) for name, ref in pairs.items()}
    print(f"{'row':26}{'task batches':>14}{'us/batch':>10}{'vs by-hand':>12}  compared with")
    for name in rows:
        r = f"{ratio[name]:.3f}" if name in ratio else ""
        print(f"{name:26}{drawn[name]:14d}{us[name]:10.1f}{r:>12}  {pairs.get(name, '')}")
    for line in skipped:
        print("skipped:", line)
    print(
        json.dumps(
            {
                "bench": "loader_overhead",
                "us_per_task_batch": {k: round(v, 2) for k, v in us.items()},
                "ratio_vs_by_hand": ratio,
                "task_batches": drawn,
                "rounds": rounds,
                "skipped": skipped,
            }
        )
    )


if __name__ == "__main__":
    main()
