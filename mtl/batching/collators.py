"""Collators: a list of tokenized examples -> one padded, self-describing batch.

One padding rule for every task type: pad `input_ids` on the right with the pad token to the
longest example in the batch (rounded up to `pad_to_multiple_of`), build `attention_mask` from
the lengths, and pad token-level `labels` with -100. The batch also says which task it belongs to
(`task`) and which rows it holds (`example_ids`), so multi-task loops and evaluation can route and
gather it without side channels.

Why not transformers' `DataCollatorWithPadding`: it goes through `tokenizer.pad`, which builds
per-example Python structures and converts them to tensors (tens to hundreds of microseconds per
batch), and it does not pad token-level labels, so token classification would need a second
collator with a second rule. Here each field is written once into a preallocated numpy array
with one vectorized assignment (no per-example tensors).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from mtl.batching.rows import IGNORE_INDEX, PackedRows
from mtl.errors import MtlError


def task_rows(batch: Mapping[str, Any]) -> dict[str, torch.Tensor | None]:
    """The tasks a batch holds and each one's rows, the one place that reads a batch's two
    shapes: a batch of one task (`task`, from `TaskCollator`) -> {task: None}, every row; a mixed
    batch (`task_ids` [B] indexing `tasks`, `labels` a dict per task: `loader=mixup`) -> {task:
    the indices of its rows} for each task with a row, in `tasks` order. A mixed batch from
    `MixupLoader` carries them (`task_rows`, planned on the host with the batch, so that the
    step reads no device value to find them); another's are found from `task_ids`."""
    if "task" in batch:
        return {batch["task"]: None}
    if "task_rows" in batch:
        return dict(batch["task_rows"])
    found = {}
    for index, name in enumerate(batch["tasks"]):
        rows = (batch["task_ids"] == index).nonzero(as_tuple=True)[0]
        if rows.numel():
            found[name] = rows
    return found


class TaskCollator:
    """Pads a batch of one task's examples into tensors.

    Input: a `PackedRows`, or a list of per-example mappings with `input_ids` (ints), `labels`
    (an int, a float, or for token classification one int per token) and `example_id`;
    `token_type_ids` is padded with 0 when present. Any `attention_mask` in the input is ignored:
    examples are unpadded, so the mask is 1 up to each example's length.

    Output: {"input_ids": Long[B, T], "attention_mask": Long[B, T], ("token_type_ids": Long[B, T]),
    "labels": Long[B] | Long[B, T] (-100 on padding) | Float[B], "task": task_name,
    "example_ids": Long[B], "num_tokens": int} with T the longest length rounded up to
    `pad_to_multiple_of`. `num_tokens` is the number of non-pad tokens (`attention_mask.sum()`)
    as a plain int, known from the packed rows for free, so counting tokens needs no tensor sum.
    """

    def __init__(
        self,
        task_name: str,
        *,
        pad_token_id: int,
        pad_to_multiple_of: int | None = None,
        label_dtype: type = np.int64,
        token_labels: bool = False,
    ) -> None:
        if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
            raise MtlError(f"pad_to_multiple_of must be a positive int, got {pad_to_multiple_of}")
        self.task_name = task_name
        self.pad_token_id = pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of
        self.label_dtype = label_dtype
        self.token_labels = token_labels

    def __call__(self, examples: PackedRows | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        rows = examples if isinstance(examples, PackedRows) else PackedRows.from_examples(examples)
        width = int(rows.lengths.max())
        if self.pad_to_multiple_of:
            width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
        # Row-major boolean assignment writes the end-to-end tokens row after row.
        mask = np.arange(width) < rows.lengths[:, None]
        input_ids = np.full(mask.shape, self.pad_token_id, dtype=np.int64)
        input_ids[mask] = rows.input_ids
        batch = {
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": torch.from_numpy(mask.astype(np.int64)),
        }
        if rows.token_type_ids is not None:
            token_type_ids = np.zeros(mask.shape, dtype=np.int64)
            token_type_ids[mask] = rows.token_type_ids
            batch["token_type_ids"] = torch.from_numpy(token_type_ids)
        if self.token_labels:
            labels = np.full(mask.shape, IGNORE_INDEX, dtype=self.label_dtype)
            labels[mask] = rows.labels
        else:
            labels = rows.labels.astype(self.label_dtype)
        batch["labels"] = torch.from_numpy(labels)
        batch["task"] = self.task_name
        batch["example_ids"] = torch.from_numpy(rows.example_ids.astype(np.int64))
        batch["num_tokens"] = len(rows.input_ids)  # the rows' tokens end to end
        return batch

    def __repr__(self) -> str:
        return (
            f"TaskCollator({self.task_name!r}, pad_token_id={self.pad_token_id}, "
            f"pad_to_multiple_of={self.pad_to_multiple_of}, "
            f"label_dtype={self.label_dtype.__name__}, "
            f"token_labels={self.token_labels})"
        )
