"""Per-batch overhead of the composite loaders over three in-memory tasks.

Every row iterates the same three per-task DataLoaders (pre-tokenized, padded tensors in memory,
RandomBatchSampler of 32, a collate that only indexes tensors and, like mtl's collators, adds the
batch's non-pad token count `num_tokens` as a plain int, so the loaders themselves are cheap and
any overhead shows), and reports microseconds per task batch drawn:

- `sequential`, `round_robin`, `random` (each_once) and `mixup` (cycle_to_longest) beside
  `by_hand`: the same DataLoaders (same collate) iterated in a plain loop in the same order as
  the loader's schedule, a fresh iterator per pass. For mixup: one batch of each task per step,
  cycling, merged by pad + cat + random row interleaving (the same
  `default_rng([seed, epoch, step])`
  draw) of input_ids, attention_mask and labels, plus the permuted task ids a multi-task loop
  needs to route rows; the loader does this and also splits the labels per task;
- peers, optional imports: Lightning `CombinedLoader` in mode `sequential` (beside our
  sequential) and `max_size_cycle` (one batch of each task per step, no merge; beside a by-hand
  zip of cycling iterators), and HF datasets `interleave_datasets` over the tasks pre-batched
  with `Dataset.batch(32)` (random task per step, probabilities by size; beside our random).

Timing: one torch thread (intra-op thread wake-ups on a small shared machine made the merge
10x noisier); every row runs once per round, rows interleaved, `--rounds` rounds after one warm-up
round; the best round counts. Prints one table and one JSON line (ratios to by-hand: goal <= 1.05).

    python benchmarks/bench_loader_overhead.py [--quick] [--rounds 5]
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from harness import best_of, emit, parser, passes, table
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
        self.lengths = lengths.tolist()

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> int:
        return i

    def __getitems__(self, indices: list[int]) -> list[int]:
        return indices

    def collate(self, indices: list[int]) -> dict[str, torch.Tensor | int]:
        idx = torch.tensor(indices)
        return {
            "input_ids": self.input_ids[idx],
            "attention_mask": self.attention_mask[idx],
            "labels": self.labels[idx],
            # mtl's collator knows this from its packed rows; here a cheap stand-in (~1 us)
            "num_tokens": sum(map(self.lengths.__getitem__, indices)),
        }


def make_loaders(scale: float) -> dict[str, DataLoader]:
    loaders = {}
    for seed, (name, (n, width)) in enumerate(TASKS.items()):
        ds = Rows(int(n * scale), width, seed)
        sampler = RandomBatchSampler(np.full(len(ds), width), BATCH_SIZE, seed=seed)
        loaders[name] = DataLoader(ds, batch_sampler=sampler, collate_fn=ds.collate)
    return loaders


def by_hand(loaders: dict[str, DataLoader], schedule: np.ndarray) -> Iterator:
    """The tasks' batches read in the order of `schedule` (task index per step)."""
    nexts = [passes(dl).__next__ for dl in loaders.values()]
    for t in schedule.tolist():
        yield nexts[t]()


def by_hand_zip(loaders: dict[str, DataLoader], steps: int) -> Iterator:
    """One batch of every task per step; a task that runs out starts its next pass."""
    nexts = [passes(dl).__next__ for dl in loaders.values()]
    for _ in range(steps):
        yield [n() for n in nexts]


def by_hand_mixup(loaders: dict[str, DataLoader], steps: int, epoch: int = 0) -> Iterator:
    """Pad + cat + interleave the tasks' rows at random (each task's rows in order), as one
    would write it in a training loop, with the task ids."""
    for step, batches in enumerate(by_hand_zip(loaders, steps)):
        width = max(b["input_ids"].shape[1] for b in batches)
        sizes = [len(b["labels"]) for b in batches]
        tasks = np.repeat(np.arange(len(batches)), sizes)
        slots = np.random.default_rng([0, epoch, step]).permutation(tasks)
        perm = np.empty(len(tasks), dtype=np.int64)
        perm[np.argsort(slots, kind="stable")] = np.arange(len(tasks))
        order = torch.from_numpy(perm)
        yield {
            key: torch.cat([F.pad(b[key], (0, width - b[key].shape[1])) for b in batches])[order]
            for key in ("input_ids", "attention_mask")
        } | {
            "labels": torch.cat([b["labels"] for b in batches])[order],
            "task_ids": torch.from_numpy(tasks[perm]),
        }


def check_same_batches(ours: dict, rows: dict) -> None:
    """Epoch 0 of each loader and its by-hand row yield the same batches (then reset epoch 0)."""
    for name, loader in ours.items():
        for a, b in zip(loader, rows[f"by_hand_{name}"](), strict=True):
            for key in ("input_ids", "attention_mask", "task_ids"):
                assert key not in a or torch.equal(a[key], b[key]), (name, key)
        loader.set_epoch(0)


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
        return "datasets not installed: pip install -e ."
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


def mtl_loaders(loaders: dict[str, DataLoader]) -> dict:
    return {
        "sequential": SequentialLoader(loaders, shuffle_tasks=False),
        "round_robin": RoundRobinLoader(loaders),
        "random": RandomLoader(loaders),
        "mixup": MixupLoader(loaders),
    }


def add_peers(loaders: dict, rows: dict, per_step: dict, pairs: dict) -> list[str]:
    """Add the peers' rows (task batches per step, the by-hand row each is compared with);
    returns one line per peer that is not installed."""
    skipped = []
    lightning = lightning_rows(loaders)
    if isinstance(lightning, str):
        skipped.append(lightning)
        print(lightning)
    else:
        rows |= lightning
        per_step |= {"lightning_sequential": 1, "lightning_max_size_cycle": len(loaders)}
        pairs |= {
            "lightning_sequential": "by_hand_sequential",
            "lightning_max_size_cycle": "by_hand_zip",
        }
    hf = hf_interleave_row(loaders)  # its own length (all_exhausted oversamples small tasks)
    if isinstance(hf, str):
        skipped.append(hf)
        print(hf)
    else:
        rows["hf_interleave"] = hf
        per_step["hf_interleave"] = 1
        pairs["hf_interleave"] = "by_hand_random"
    return skipped


def main() -> None:
    args = parser(__doc__, "tasks 50x smaller, 1 round")
    args.add_argument("--rounds", type=int, default=5)
    args = args.parse_args()
    rounds = 1 if args.quick else args.rounds
    warnings.filterwarnings("ignore")  # Lightning's pytree deprecation notice
    torch.set_num_threads(1)  # as in a DataLoader worker; 2 threads on a busy 2-core box jitter 10x
    loaders = make_loaders(0.02 if args.quick else 1.0)

    ours = mtl_loaders(loaders)
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
    check_same_batches(ours, rows)
    per_step |= {f"by_hand_{n}": per_step[n] for n in ours} | {"by_hand_zip": len(loaders)}

    skipped = add_peers(loaders, rows, per_step, pairs)

    drawn: dict[str, int] = {}

    def draw(name: str) -> Callable[[], int]:
        def run() -> int:
            drawn[name] = sum(1 for _batch in rows[name]()) * per_step[name]
            return drawn[name]

        return run

    best = best_of({name: draw(name) for name in rows}, rounds)
    us = {name: best[name] * 1e6 for name in rows}
    ratio = {name: round(us[name] / us[ref], 3) for name, ref in pairs.items()}
    table(
        ["row", "task batches", "us/batch", "vs by-hand", "compared with"],
        [[n, drawn[n], us[n], ratio.get(n, ""), pairs.get(n, "")] for n in rows],
        [0, 0, 1, 3, 0],
    )
    for line in skipped:
        print("skipped:", line)
    figures = {
        "bench": "loader_overhead",
        "peer": "the same DataLoaders by hand; Lightning CombinedLoader; HF interleave_datasets",
        "us_per_task_batch": {k: round(v, 2) for k, v in us.items()},
        "ratio_vs_by_hand": ratio,
        "task_batches": drawn,
        "rounds": rounds,
        "skipped": skipped,
    }
    emit(figures, args.json)


if __name__ == "__main__":
    main()
