"""A `Task` is a name, a type, tokenized train/dev splits and the label names.

`build_task` reads a source (a bundled task, a local file, or a Hugging Face hub dataset), checks
it, maps labels to ids and tokenizes it once with `Dataset.map(batched=True)`. Every split ends
with the columns `input_ids`, `attention_mask`, `labels`, `length` (token count, what the
samplers read) and `example_id` (the row index in the split). Token type ids are not kept: every
task is single-sequence, so they would all be 0, which is also what the encoder assumes without
them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import datasets
from datasets import Dataset
from transformers import PreTrainedTokenizerBase

from mtl.data.sources import read_source
from mtl.errors import MtlError

TASK_TYPES = ("sequence_classification", "token_classification", "regression")
IGNORE_INDEX = -100


@dataclass
class Task:
    """One task: tokenized `train` and `dev` datasets plus what the head needs to know.

    `label_names` lists the classes (or tags) in id order; it is None for regression.
    `pad_token_id` is the tokenizer's, for the collator.
    """

    name: str
    type: str
    train: Dataset
    dev: Dataset
    label_names: list[str] | None = None
    pad_token_id: int = 0

    @property
    def num_labels(self) -> int:
        """Output size of the head: the number of classes or tags; 1 for regression."""
        return 1 if self.type == "regression" else len(self.label_names or [])


def build_task(
    name: str,
    *,
    type: str,
    source: dict[str, Any],
    tokenizer: PreTrainedTokenizerBase,
    text_column: str = "text",
    label_column: str = "label",
    max_length: int = 256,
    label_names: Sequence[str] | None = None,
    dev_fraction: float = 0.1,
    seed: int = 0,
    max_examples: int | None = None,
) -> Task:
    """Read, check, label and tokenize one task.

    source is one of
      {"bundled": "pydoc_topic", ...options}  see `mtl.data.bundled` (its own split and labels);
      {"path": "train.jsonl", "dev_path": "dev.jsonl"}  json/jsonl/csv/parquet; without
          dev_path, a seeded `dev_fraction` of the rows becomes dev;
      {"hub": "glue", "config": "sst2", "train_split": "train", "dev_split": "validation"}.
    Classification labels may be names or ids; without `label_names` the names are the sorted
    distinct train labels (for integer ids: "0".."max"). Token classification text is a list of
    words or a whitespace-separated string, and labels are one tag per word; a word's tag goes
    to its first subtoken, the other positions get -100. `max_examples` caps each split.
    """
    if type not in TASK_TYPES:
        raise MtlError(f"task {name!r}: unknown type {type!r}; choose one of {list(TASK_TYPES)}")
    with _quiet_datasets():
        return _build_task(
            name, type, source, tokenizer, text_column, label_column, max_length,
            label_names, dev_fraction, seed, max_examples,
        )  # fmt: skip


@contextmanager
def _quiet_datasets() -> Iterator[None]:
    """No `datasets` progress bars while building (they flood stderr, one per split and step)."""
    was_disabled = datasets.utils.are_progress_bars_disabled()
    datasets.utils.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            datasets.utils.enable_progress_bars()


def _build_task(
    name: str,
    type: str,
    source: dict[str, Any],
    tokenizer: PreTrainedTokenizerBase,
    text_column: str,
    label_column: str,
    max_length: int,
    label_names: Sequence[str] | None,
    dev_fraction: float,
    seed: int,
    max_examples: int | None,
) -> Task:
    read = read_source(name, source, seed=seed, dev_fraction=dev_fraction)
    train, dev = read.splits["train"], read.splits["dev"]
    label_names = list(label_names) if label_names is not None else read.label_names
    splits = {}
    for split, ds in (("train", train), ("dev", dev)):
        if len(ds) == 0:
            raise MtlError(f"task {name!r}: the {split} split is empty; give it some rows")
        for column in (text_column, label_column):
            if column not in ds.column_names:
                raise MtlError(
                    f"task {name!r}: column {column!r} missing from the {split} split (columns: "
                    f"{ds.column_names}); set text_column/label_column to the right names"
                )
        if max_examples is not None:
            ds = ds.select(range(min(max_examples, len(ds))))
        ds = ds.select_columns([text_column, label_column])
        if label_names is None and type != "regression" and split == "train":
            label_names = _infer_label_names(name, ds[label_column], type)
        splits[split] = _encode(
            ds, name, split, type, tokenizer, text_column, label_column, max_length, label_names
        )
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return Task(name, type, splits["train"], splits["dev"], label_names, pad_token_id)


def _infer_label_names(name: str, labels: list, type: str) -> list[str]:
    values = [tag for tags in labels for tag in tags] if type == "token_classification" else labels
    if all(isinstance(v, str) for v in values):
        return sorted(set(values))
    if all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        return [str(i) for i in range(max(values) + 1)]
    raise MtlError(
        f"task {name!r}: labels must be all names (str) or all ids (int >= 0); give label_names"
    )


def _label_id(name: str, split: str, label: Any, label_names: list[str]) -> int:
    if isinstance(label, str):
        if label in label_names:
            return label_names.index(label)
    elif isinstance(label, int) and not isinstance(label, bool) and 0 <= label < len(label_names):
        return label
    raise MtlError(
        f"task {name!r}: label {label!r} in the {split} split is not one of {label_names} "
        f"(or an id in 0..{len(label_names) - 1}); fix the data or label_names"
    )


def _encode(
    ds: Dataset,
    name: str,
    split: str,
    type: str,
    tokenizer: PreTrainedTokenizerBase,
    text_column: str,
    label_column: str,
    max_length: int,
    label_names: list[str] | None,
) -> Dataset:
    ids = {label: i for i, label in enumerate(label_names or [])}

    def to_id(label: Any) -> int:
        if isinstance(label, str) and label in ids:
            return ids[label]
        return _label_id(name, split, label, label_names or [])

    def encode(batch: dict[str, list], indices: list[int]) -> dict[str, list]:
        texts, labels = batch[text_column], batch[label_column]
        if type == "token_classification":
            words = [text.split() if isinstance(text, str) else list(text) for text in texts]
            for row, (w, tags) in enumerate(zip(words, labels, strict=True)):
                if len(w) != len(tags):
                    raise MtlError(
                        f"task {name!r}: row {indices[row]} of the {split} split has {len(w)} "
                        f"words but {len(tags)} tags; give one tag per word"
                    )
            enc = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length)
            out_labels = []
            for row, tags in enumerate(labels):
                tag_ids, previous = [], None
                for word in enc.word_ids(row):
                    first = word is not None and word != previous
                    tag_ids.append(to_id(tags[word]) if first else IGNORE_INDEX)
                    previous = word
                out_labels.append(tag_ids)
        else:
            if not all(isinstance(t, str) for t in texts):
                raise MtlError(f"task {name!r}: column {text_column!r} must hold strings")
            enc = tokenizer(texts, truncation=True, max_length=max_length)
            if type == "regression":
                out_labels = [_to_float(name, split, label) for label in labels]
            else:
                out_labels = [to_id(label) for label in labels]
        return {
            "input_ids": enc["input_ids"],
            "attention_mask": enc["attention_mask"],
            "labels": out_labels,
            "length": [len(x) for x in enc["input_ids"]],
            "example_id": indices,
        }

    return ds.map(encode, batched=True, with_indices=True, remove_columns=ds.column_names)


def _to_float(name: str, split: str, label: Any) -> float:
    try:
        return float(label)
    except (TypeError, ValueError):
        raise MtlError(
            f"task {name!r}: regression label {label!r} in the {split} split is not a number"
        ) from None
