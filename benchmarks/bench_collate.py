"""Time per collate of one batch (32 examples, lengths lognormal with mean ~60, max 256).

Rows (sequence classification, pad id 0; all produce input_ids + attention_mask + labels):
- `mtl_packed`: `mtl.batching.TaskCollator` (sequence classification's) on a `PackedRows` (the
  rows end to end, what the training datasets' `__getitems__` hands the DataLoader);
- `mtl_dicts`: the same collator on a list of per-example dicts (it packs them first);
- `naive_pad_sequence`: one tensor per example, then `torch.nn.utils.rnn.pad_sequence` for ids
  and mask, `torch.tensor` for labels (the reference to beat by >= 10x);
- `hf_with_padding`: the peer, transformers `DataCollatorWithPadding` (packaged MiniLM
  tokenizer) on per-example dicts of lists.

Timing: one torch thread; each row collates the same `--batches` pre-built batches, rows
interleaved, `--rounds` rounds, best round per row, in microseconds per batch. Goal for
`mtl_packed`: <= 50 us and >= 10x below `naive_pad_sequence`. Prints one table and one JSON line.

    python benchmarks/bench_collate.py [--quick] [--rounds 5] [--batches 200] [--json PATH]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from harness import best_of, emit, parser, table
from torch.nn.utils.rnn import pad_sequence

from mtl.batching import PackedRows, TaskCollator

BATCH_SIZE = 32


def make_batches(count: int, seed: int = 0) -> list[list[dict[str, Any]]]:
    rng = np.random.default_rng(seed)
    batches = []
    for b in range(count):
        lengths = np.clip(rng.lognormal(3.9, 0.6, BATCH_SIZE), 4, 256).astype(int)
        batches.append(
            [
                {
                    "input_ids": rng.integers(100, 30_000, n).tolist(),
                    "labels": int(rng.integers(0, 2)),
                    "example_id": b * BATCH_SIZE + i,
                }
                for i, n in enumerate(lengths)
            ]
        )
    return batches


def naive(examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    ids = [torch.tensor(e["input_ids"]) for e in examples]
    masks = [torch.ones(len(e["input_ids"]), dtype=torch.long) for e in examples]
    return {
        "input_ids": pad_sequence(ids, batch_first=True, padding_value=0),
        "attention_mask": pad_sequence(masks, batch_first=True, padding_value=0),
        "labels": torch.tensor([e["labels"] for e in examples]),
    }


def hf_collator() -> Callable[[list[dict[str, Any]]], Any] | str:
    try:
        from transformers import DataCollatorWithPadding

        from mtl.data import load_tokenizer

        return DataCollatorWithPadding(load_tokenizer(None), return_tensors="pt")
    except Exception as err:  # optional peer: any failure to load it skips the row
        return f"hf_with_padding skipped: {type(err).__name__}: {err}"


def collators(batches: list[list[dict[str, Any]]]) -> tuple[dict, list[str]]:
    """Each row's collate function with its inputs, and the rows skipped."""
    packed = [PackedRows.from_examples(b) for b in batches]
    hf_inputs = [
        [{"input_ids": e["input_ids"], "attention_mask": [1] * len(e["input_ids"]),
          "labels": e["labels"]} for e in b]
        for b in batches
    ]  # fmt: skip
    collate = TaskCollator("bench", pad_token_id=0)
    rows: dict[str, tuple[Callable[[Any], Any], list[Any]]] = {
        "mtl_packed": (collate, packed),
        "mtl_dicts": (collate, batches),
        "naive_pad_sequence": (naive, batches),
    }
    hf = hf_collator()
    if isinstance(hf, str):
        return rows, [hf]
    return rows | {"hf_with_padding": (hf, hf_inputs)}, []


def main() -> None:
    args = parser(__doc__, "20 batches, 1 round")
    args.add_argument("--rounds", type=int, default=5)
    args.add_argument("--batches", type=int, default=200)
    args = args.parse_args()
    torch.set_num_threads(1)
    rounds, count = (1, 20) if args.quick else (args.rounds, args.batches)

    batches = make_batches(count)
    rows, skipped = collators(batches)

    def collate_all(fn: Callable[[Any], Any], inputs: list[Any]) -> Callable[[], int]:
        return lambda: len([fn(batch) for batch in inputs])

    best = best_of({name: collate_all(*row) for name, row in rows.items()}, rounds)
    us = {name: best[name] * 1e6 for name in rows}
    naive_over = {name: us["naive_pad_sequence"] / us[name] for name in rows}
    mean_len = float(np.mean([len(e["input_ids"]) for b in batches for e in b]))
    print(f"batch {BATCH_SIZE}, mean length {mean_len:.1f}, {count} batches, best of {rounds}")
    table(["collate", "us/batch", "naive / this"], [[n, us[n], naive_over[n]] for n in rows], 1)
    for line in skipped:
        print(line)
    speedup = naive_over["mtl_packed"]
    hf_note = ""
    if "hf_with_padding" in us:
        hf_note = f", {us['hf_with_padding'] / us['mtl_packed']:.1f}x below HF"
    print(
        f"mtl_packed: {us['mtl_packed']:.1f} us (goal <= 50), {speedup:.1f}x below naive "
        f"(goal >= 10){hf_note}"
    )
    figures = {
        "bench": "collate",
        "peer": "transformers DataCollatorWithPadding; reference: naive pad_sequence",
        "batch_size": BATCH_SIZE,
        "mean_length": round(mean_len, 1),
        "us_per_batch": {k: round(v, 2) for k, v in us.items()},
        "naive_over_mtl_packed": round(speedup, 2),
        "skipped": skipped,
    }
    emit(figures, args.json)


if __name__ == "__main__":
    main()
