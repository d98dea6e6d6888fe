"""Padding efficiency and collate time of the task types whose rows are not one short text:
sentence pairs (pydoc_pair), multiple choice (pydoc_choice) and extractive QA (pydoc_qa).

For each task, built as its YAML in `conf/task/` says (packaged MiniLM tokenizer), one epoch
of its train split batched at the YAML's batch size by `random` (RandomBatchSampler) and by
`block_shuffle` (BlockShuffleBatchSampler, sort_bs_num=50, the default), collated by the task's
own collator as training does. Padding efficiency: non-pad tokens / padded tokens of the
collated batches (for multiple choice, the choices are the rows). Collate time: median
microseconds per batch of `dataset.__getitems__` + the collator, over the epoch's batches,
with random batches. Prints one table and one JSON line.

    python benchmarks/bench_task_types.py [--quick]
"""

from __future__ import annotations

import time

import numpy as np
import yaml
from harness import CONF, emit, parser, table

from mtl.config import TaskConfig
from mtl.data import build_task_from_config, load_tokenizer, task_dataset
from mtl.samplers import BlockShuffleBatchSampler, RandomBatchSampler
from mtl.task_types import task_config

TASKS = ("pydoc_pair", "pydoc_choice", "pydoc_qa")


def bundled_task_config(name: str) -> TaskConfig:
    node = yaml.safe_load((CONF / "task" / f"{name}.yaml").read_text())
    node.pop("defaults", None)  # the type's schema, named for Hydra
    return task_config(node, name)


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
    args = parser(__doc__, "200 examples per task").parse_args()
    tokenizer = load_tokenizer()
    figures: dict = {"bench": "task_types", "peer": "random batches (RandomBatchSampler)"}
    figures |= {"padding_efficiency": {}, "collate_us": {}}
    rows = []
    for name in TASKS:
        config = bundled_task_config(name)
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
        rows.append([name, config.type, size, eff_random, eff_block, collate_us])
    table(
        ["task", "type", "batch", "random", "block_shuffle", "collate us"],
        rows,
        [0, 0, 0, 3, 3, 1],
    )
    emit(figures, args.json)


if __name__ == "__main__":
    main()
