"""Padding efficiency and collate time of the task types whose rows are not one short text:
sentence pairs (pydoc_pair), multiple choice (pydoc_choice) and extractive QA (pydoc_qa).

For each task, built as its YAML in `mtl/conf/task/` says (packaged MiniLM tokenizer), one epoch
of its train split batched at the YAML's batch size by `random` (RandomBatchSampler) and by
`block_shuffle` (BlockShuffleBatchSampler, sort_bs_num=50, the default), collated by the task's
own collator as training does. Padding efficiency: non-pad tokens / padded tokens of the
collated batches (for multiple choice, the choices are the rows). Collate time: median
microseconds per batch of `dataset.__getitems__` + the collator, over the epoch's batches,
with random batches. Prints one table and one JSON line.

    python scripts/bench_task_types.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from importlib.resources import files

import numpy as np
import yaml

from mtl.config import TaskConfig
from mtl.data import build_task_from_config, load_tokenizer, task_dataset
from mtl.samplers import BlockShuffleBatchSampler, RandomBatchSampler

TASKS = ("pydoc_pair", "pydoc_choice", "pydoc_qa")


def task_config(name: str) -> TaskConfig:
    node = yaml.safe_load((files("mtl.conf") / "task" / f"{name}.yaml").read_text())
    return TaskConfig(**node)


def measure(task, batch_size: int, sampler) -> tuple[float, float]:
    """(padding efficiency, median collate microseconds) over one epoch of `sampler`."""
    dataset, collate = task_dataset(task, "train"), task.collator()
    real = padded = 0
    times = []
    for batch_indices in sampler:
        start = time.perf_counter()
        batch = collate(dataset.__getitems__(batch_indices))
        times.append(time.perf_counter() - start)
        real += int(batch["attention_mask"].sum())
        padded += batch["attention_mask"].numel()
    return real / padded, float(np.median(times) * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 examples per task")
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    tokenizer = load_tokenizer()
    figures: dict = {"bench": "task_types", "padding_efficiency": {}, "collate_us": {}}
    header = f"{'task':<14} {'type':<24} {'batch':>5} {'random':>8} {'block_shuffle':>14}"
    print(f"{header} {'collate us':>11}")
    for name in TASKS:
        config = task_config(name)
        task = build_task_from_config(
            name, config, tokenizer, max_examples=200 if args.quick else None
        )
        lengths = task.train["length"]
        size = config.batch_size
        random = RandomBatchSampler(lengths, size, seed=0)
        block = BlockShuffleBatchSampler(lengths, size, seed=0, sort_bs_num=50)
        eff_random, collate_us = measure(task, size, random)
        eff_block, _ = measure(task, size, block)
        figures["padding_efficiency"][name] = {
            "random": round(eff_random, 3),
            "block_shuffle": round(eff_block, 3),
        }
        figures["collate_us"][name] = round(collate_us, 1)
        print(
            f"{name:<14} {config.type:<24} {size:>5} {eff_random:>8.3f} {eff_block:>14.3f} "
            f"{collate_us:>11.1f}"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
