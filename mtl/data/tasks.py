"""A `Task` is a name, a task type, tokenized train/dev splits and the label names.

`build_task_from_config` reads a source (a bundled task, local files, or a Hugging Face hub
dataset), checks it, and encodes it once with the task type's `encode` through
`Dataset.map(batched=True)`. Every split ends with the columns `input_ids`, `labels`, `length`
(token count, what the samplers read), `example_id` (the source row) and, for sentence pairs,
`token_type_ids`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from datasets import ClassLabel, Dataset
from datasets import Sequence as SequenceFeature
from transformers import PreTrainedTokenizerBase

from mtl.data.sources import read_source
from mtl.data.tokenizer import TokenizerRef
from mtl.errors import MtlError
from mtl.quiet import quiet_libraries
from mtl.task_types import TaskType, task_type_class


@dataclass
class Task:
    """One task: its type, tokenized `train` and `dev` datasets and what the head needs.

    `type` is the configured type name and `task_type` its `TaskType` object. `label_names`
    lists the classes (or tags) in id order; it is None for regression. `pad_token_id` is the
    tokenizer's, for the collator. `splits` holds every encoded split by name. `inputs` holds
    the source rows (every column) of a test split without labels (its label column absent or
    all null): not encoded or scored; a run writes their predictions instead.
    """

    name: str
    type: str
    task_type: TaskType
    splits: dict[str, Dataset]
    label_names: list[str] | None = None
    pad_token_id: int = 0
    inputs: dict[str, Dataset] = field(default_factory=dict)

    @property
    def train(self) -> Dataset:
        return self.splits["train"]

    @property
    def dev(self) -> Dataset:
        return self.splits["dev"]

    @property
    def num_labels(self) -> int:
        """Output size of the head: the number of classes or tags; 1 for regression."""
        return self.task_type.num_labels(self.label_names)

    def collator(self, pad_to_multiple_of: int | None = None):
        """Pads this task's rows into batches (its task type's collator)."""
        return self.task_type.collator(self.pad_token_id, pad_to_multiple_of)


def build_task_from_config(
    name: str,
    config: Any,
    tokenizer: PreTrainedTokenizerBase,
    *,
    seed: int = 0,
    max_examples: int | None = None,
) -> Task:
    """Read, check, label and tokenize one task from its config (`mtl.config.TaskConfig`).

    `config.type` is a task type (`mtl.task_types`); `config.source` is described in
    `mtl.data.sources`. Classification labels may be names or ids; without `label_names` they
    come from the source (bundled tasks, `ClassLabel` features), else they are the sorted
    distinct train labels (for integer ids: "0".."max"). `max_examples` caps each split: the
    train and dev splits to a sample of that many rows drawn with `seed` (kept in file order, so
    a source sorted by class still gives every class), a label-less test split to its first rows;
    the task's own `max_train_examples` caps the train split alone, the same way.
    """
    task_type = task_type_class(config.type, name)(name, config)
    with quiet_libraries():
        source = read_source(name, dict(config.source), seed=seed, dev_fraction=config.dev_fraction)
        given = [n for n in (max_examples, config.max_train_examples) if n is not None]
        train_cap = min(given) if given else None
        raw, inputs = _checked_splits(source.splits, task_type, max_examples, seed, train_cap)
        label_names = (
            config.label_names or source.label_names or _feature_names(raw["train"], config)
        )
        if label_names is None and config.label_column in raw["train"].column_names:
            label_names = task_type.infer_label_names(raw["train"][config.label_column])
        label_names = list(label_names) if label_names is not None else None
        encoded = {
            split: _encode(ds, task_type, tokenizer, label_names, split)
            for split, ds in raw.items()
        }
        own = f"task.{name}.max_train_examples"
        option = "data.max_examples" if train_cap == max_examples else own
        capped = f" ({train_cap} sampled rows: {option})" if train_cap else ""
        task_type.check_train_labels(raw["train"], f"task {name!r}, train split{capped}")
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return Task(name, config.type, task_type, encoded, label_names, pad_token_id, inputs)


def _checked_splits(
    splits: dict[str, Dataset],
    task_type: TaskType,
    max_examples: int | None,
    seed: int,
    train_cap: int | None,
) -> tuple[dict[str, Dataset], dict[str, Dataset]]:
    """The labelled splits and the label-less test split (if any), each checked and capped
    (train to `train_cap`, the others to `max_examples`); train first, so that a wrong column
    name is reported for the train split."""
    checked, inputs = {}, {}
    for split in sorted(splits, key=lambda s: s == "test"):  # a stable sort: test last
        ds = splits[split]
        if split == "test" and _unlabeled(ds, task_type):
            inputs["test"] = _checked_inputs(ds, task_type, max_examples)
        else:
            cap = train_cap if split == "train" else max_examples
            checked[split] = _checked(ds, task_type, split, cap, seed)
    return {s: checked[s] for s in splits if s in checked}, inputs


def _required(
    ds: Dataset,
    task_type: TaskType,
    split: str,
    columns: list[str],
    max_examples: int | None,
    seed: int | None = None,
) -> Dataset:
    """`ds` checked to have rows and `columns` (one line naming the fix otherwise), capped at
    `max_examples` rows: a sample drawn with `seed` kept in file order, or the first rows
    without a seed."""
    name = task_type.name
    if len(ds) == 0:
        raise MtlError(f"task {name!r}: the {split} split is empty; give it some rows")
    for column in columns:
        if column not in ds.column_names:
            raise MtlError(
                f"task {name!r}: column {column!r} missing from the {split} split (columns: "
                f"{ds.column_names}); set the task's *_column keys to the right names"
            )
    if max_examples is not None and max_examples < len(ds):
        if seed is None:
            ds = ds.select(range(max_examples))
        else:
            ds = ds.select(sorted(random.Random(seed).sample(range(len(ds)), max_examples)))
    return ds


def _checked(
    ds: Dataset, task_type: TaskType, split: str, max_examples: int | None, seed: int
) -> Dataset:
    columns = task_type.columns()
    return _required(ds, task_type, split, columns, max_examples, seed).select_columns(columns)


def _label_columns(task_type: TaskType) -> list[str]:
    inputs = task_type.input_columns()
    return [c for c in task_type.columns() if c not in inputs]


def _unlabeled(ds: Dataset, task_type: TaskType) -> bool:
    """Whether a split has no labels: each label column absent, or null in every row (file
    builders fill a column that the train split has with nulls)."""
    labels = _label_columns(task_type)
    return bool(labels) and all(
        c not in ds.column_names or ds.data.column(c).null_count == len(ds) for c in labels
    )


def _checked_inputs(ds: Dataset, task_type: TaskType, max_examples: int | None) -> Dataset:
    """A label-less test split: its input columns checked, every other column kept but the
    (null) label columns."""
    ds = _required(ds, task_type, "test", task_type.input_columns(), max_examples)
    return ds.remove_columns([c for c in _label_columns(task_type) if c in ds.column_names])


def _feature_names(ds: Dataset, config: Any) -> list[str] | None:
    """Label names carried by the data's features (`ClassLabel`, e.g. hub datasets)."""
    feature = ds.features.get(config.label_column)
    if isinstance(feature, SequenceFeature):
        feature = feature.feature
    elif isinstance(feature, list) and feature:
        feature = feature[0]
    return list(feature.names) if isinstance(feature, ClassLabel) else None


def _encode(
    ds: Dataset,
    task_type: TaskType,
    tokenizer: PreTrainedTokenizerBase,
    label_names: Sequence[str] | None,
    split: str,
) -> Dataset:
    encode = Encode(task_type, TokenizerRef(tokenizer), label_names, split)
    task_type.check_rows(ds, tokenizer, encode.where)
    return ds.map(encode, batched=True, with_indices=True, remove_columns=ds.column_names)


class Encode:
    """The function `Dataset.map` tokenizes a split with: the task type's `encode`, and each
    model row's `example_id` (its source row). A class, not a closure, for the map's
    fingerprint: datasets pickles a closure with its module's globals (about 50 ms a split),
    an instance as its fields (the task type, the tokenizer's name and digest, the labels)."""

    def __init__(self, task_type: TaskType, ref: TokenizerRef, label_names, split: str):
        self.task_type, self.ref, self.label_names = task_type, ref, label_names
        self.where = f"task {task_type.name!r}, {split} split"

    def __call__(self, rows: dict[str, list], indices: list[int]) -> dict[str, list]:
        out = self.task_type.encode(rows, self.ref.tokenizer, self.label_names, self.where)
        if "example_id" in out:  # several model rows a source row: their positions in `rows`
            out["example_id"] = [indices[i] for i in out["example_id"]]
        else:
            out["example_id"] = indices
        return out
