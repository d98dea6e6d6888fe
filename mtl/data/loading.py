"""From a `Task` split to a torch `DataLoader` of padded, self-describing batches.

`TokenizedSplit` copies a tokenized split's arrow columns once into flat numpy arrays (all
tokens of the split end to end, plus row offsets). Torch's DataLoader calls `__getitems__` with
the whole batch of indices; it gathers the batch's tokens with a few vectorized numpy calls into
a `PackedRows`, which the collator pads with one assignment per field.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import torch
from datasets import Dataset
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as TorchDataset

from mtl.batching.collators import PackedRows
from mtl.data.tasks import Task
from mtl.errors import MtlError


def _flat_list_column(ds: Dataset, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of a list column: row i is values[offsets[i]:offsets[i + 1]]."""
    array = ds.data.column(column).combine_chunks()
    values = array.values.to_numpy(zero_copy_only=False)
    return values, array.offsets.to_numpy().astype(np.int64)


class TokenizedSplit(TorchDataset):
    """A tokenized split held as numpy arrays; item i is the dict the collators read.

    Items: {"input_ids": int array, "labels": int | float | int array, "example_id": int}.
    """

    def __init__(self, ds: Dataset) -> None:
        if ds._indices is not None:  # a select()/shuffle() view: materialize the row order
            ds = ds.flatten_indices()
        self.input_ids, self.offsets = _flat_list_column(ds, "input_ids")
        label_type = ds.data.schema.field("labels").type
        self.token_labels = pa.types.is_list(label_type) or pa.types.is_large_list(label_type)
        if self.token_labels:
            self.labels, self.label_offsets = _flat_list_column(ds, "labels")
        else:
            self.labels = ds.data.column("labels").to_numpy()
        self.example_ids = ds.data.column("example_id").to_numpy()
        self.token_type_ids = None
        if "token_type_ids" in ds.column_names:
            self.token_type_ids, _ = _flat_list_column(ds, "token_type_ids")

    def __len__(self) -> int:
        return len(self.example_ids)

    def __getitem__(self, index: int) -> dict[str, Any]:
        start, end = self.offsets[index], self.offsets[index + 1]
        if self.token_labels:
            labels = self.labels[self.label_offsets[index] : self.label_offsets[index + 1]]
        else:
            labels = self.labels[index]
        item = {
            "input_ids": self.input_ids[start:end],
            "labels": labels,
            "example_id": self.example_ids[index],
        }
        if self.token_type_ids is not None:
            item["token_type_ids"] = self.token_type_ids[start:end]
        return item

    def __getitems__(self, indices: list[int]) -> PackedRows:
        """The rows of a whole batch, gathered with a few numpy calls."""
        rows = np.asarray(indices, dtype=np.int64)
        starts, lengths = self.offsets[rows], self.offsets[rows + 1] - self.offsets[rows]
        # Positions of every token of the batch in the flat arrays, row after row.
        first = np.cumsum(lengths) - lengths
        positions = np.arange(lengths.sum()) + np.repeat(starts - first, lengths)
        if self.token_labels:
            label_starts = self.label_offsets[rows]
            labels = self.labels[positions + np.repeat(label_starts - starts, lengths)]
        else:
            labels = self.labels[rows]
        token_type_ids = None if self.token_type_ids is None else self.token_type_ids[positions]
        return PackedRows(
            self.input_ids[positions], lengths, labels, self.example_ids[rows], token_type_ids
        )


def task_dataset(task: Task, split: str = "train") -> TokenizedSplit:
    """The torch-facing dataset of one split ("train", "dev", or "test" where given) of `task`."""
    if split not in task.splits:
        raise MtlError(
            f"task {task.name!r}: unknown split {split!r}; use one of {list(task.splits)}"
        )
    return task.task_type.dataset(task.splits[split])


def task_loader(
    task: Task,
    batch_sampler,
    split: str = "train",
    *,
    pad_to_multiple_of: int | None = None,
    num_workers: int = 0,
    pin_memory: bool = False,
    persistent_workers: bool = False,
    generator: torch.Generator | None = None,
) -> DataLoader:
    """A DataLoader over one split of `task`, batched by `batch_sampler` (any sampler of
    `mtl.samplers`, built over `task.<split>["length"]`), padded by the task's collator.

    Call `loader.batch_sampler.set_epoch(epoch)` before each epoch (and `set_start(k)` to resume
    mid-epoch); composite loaders do both. `generator`: the DataLoader's own RNG, so that
    starting an iterator leaves the global RNG (dropout) alone.
    """
    return DataLoader(
        task_dataset(task, split),
        batch_sampler=batch_sampler,
        collate_fn=task.collator(pad_to_multiple_of),
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=persistent_workers and num_workers > 0,
        generator=generator,
    )
