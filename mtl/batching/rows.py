"""Tokenized rows held as flat numpy arrays, and the batches gathered from them.

`TokenizedSplit` copies a tokenized split's arrow columns once into flat numpy arrays (all
tokens of the split end to end, plus row offsets). Torch's DataLoader calls `__getitems__` with
the whole batch of indices; it gathers the batch's tokens with a few vectorized numpy calls into
a `PackedRows`, which the collator pads with one assignment per field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from datasets import Dataset
from torch.utils.data import Dataset as TorchDataset

from mtl.errors import MtlError

#: The label of a position no loss or metric reads (padding, sub-word pieces): torch's default
#: `ignore_index` of `cross_entropy`.
IGNORE_INDEX = -100


def arrow_table(ds: Dataset | pa.Table) -> pa.Table:
    """The rows of `ds` in their order as one arrow table (a `select()`/`shuffle()` view is
    materialized; a plain dataset's table is sliced without a copy)."""
    return ds if isinstance(ds, pa.Table) else ds.with_format("arrow")[:]


def flat_list_column(table: pa.Table, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of a list column: row i is values[offsets[i]:offsets[i + 1]]."""
    array = table.column(column).combine_chunks()
    values = array.values.to_numpy(zero_copy_only=False)
    return values, array.offsets.to_numpy().astype(np.int64)


@dataclass
class PackedRows:
    """A batch of unpadded rows stored end to end: what `TokenizedSplit.__getitems__` returns.

    `input_ids` (and `token_type_ids`, if any) hold all tokens of the batch, row after row;
    `labels` holds one value (or one fixed-size label row) per row, or for token classification
    one per token like `input_ids`.
    """

    input_ids: np.ndarray
    lengths: np.ndarray
    labels: np.ndarray
    example_ids: np.ndarray
    token_type_ids: np.ndarray | None = None

    @classmethod
    def from_examples(cls, examples: Sequence[Mapping[str, Any]]) -> PackedRows:
        """Pack per-example dicts (`input_ids`, `labels`, `example_id`, opt. `token_type_ids`)."""
        if not examples:
            raise MtlError("cannot collate an empty batch; the sampler yielded no indices")
        token_labels = np.ndim(examples[0]["labels"]) > 0
        return cls(
            input_ids=np.concatenate([np.asarray(e["input_ids"]) for e in examples]),
            lengths=np.array([len(e["input_ids"]) for e in examples], dtype=np.int64),
            labels=(
                np.concatenate([np.asarray(e["labels"]) for e in examples])
                if token_labels
                else np.array([e["labels"] for e in examples])
            ),
            example_ids=np.array([e["example_id"] for e in examples], dtype=np.int64),
            token_type_ids=(
                np.concatenate([np.asarray(e["token_type_ids"]) for e in examples])
                if "token_type_ids" in examples[0]
                else None
            ),
        )


class TokenizedSplit(TorchDataset):
    """A tokenized split held as numpy arrays; item i is the dict the collators read.

    Items: {"input_ids": int array, "labels": int | float | int array, "example_id": int}.
    A list column of labels is read as one label per token (`token_labels`), unless
    `row_labels()` says that each row's list is one fixed-size label row.
    """

    def __init__(self, ds: Dataset | pa.Table) -> None:
        table = arrow_table(ds)
        self.input_ids, self.offsets = flat_list_column(table, "input_ids")
        label_type = table.schema.field("labels").type
        self.token_labels = pa.types.is_list(label_type) or pa.types.is_large_list(label_type)
        self.label_offsets = None
        if self.token_labels:
            self.labels, self.label_offsets = flat_list_column(table, "labels")
        else:
            self.labels = table.column("labels").to_numpy()
        self.example_ids = table.column("example_id").to_numpy()
        self.token_type_ids = None
        if "token_type_ids" in table.column_names:
            self.token_type_ids, _ = flat_list_column(table, "token_type_ids")

    def row_labels(self, dtype: type | None = None) -> TokenizedSplit:
        """Read the list column of labels as one fixed-size label row per example (a span's
        (start, end), a multi-hot row [K]) instead of one label per token: afterwards
        `self[i]["labels"]` is an array [K] and a batch's labels are [B, K], cast to `dtype` if
        given. Changes this split in place and returns it."""
        if not self.token_labels:
            raise MtlError("row_labels(): this split's labels are not a list column")
        counts = np.diff(self.label_offsets)
        width = int(counts[0]) if len(counts) else 0
        if (counts != width).any():
            raise MtlError(
                f"label rows of different sizes ({width} and {int(counts[counts != width][0])}); "
                "give every row the same number of labels"
            )
        labels = self.labels[self.label_offsets[:-1, None] + np.arange(width)]
        self.labels = labels if dtype is None else labels.astype(dtype)
        self.token_labels, self.label_offsets = False, None
        return self

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
