"""The task-type protocol: what one kind of task (classification, tagging, ...) provides.

A task in `conf/task/<name>.yaml` names its type with `type:`: a built-in type's short name
(its `type_name`, e.g. `sequence_classification`) or the import path of a `TaskType` subclass of
your own. The type object reads the task's columns, encodes rows into token ids and labels, makes
the head, turns the head's outputs into predictions and scores them with the task's `metrics`.
Its config keys are its `Options` dataclass: the common keys (`TaskConfig`) plus its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from hydra.utils import instantiate
from torch import nn

from mtl.batching import TaskCollator, TokenizedSplit
from mtl.errors import MtlError, import_target
from mtl.task_types.metrics import Metric, as_metric
from mtl.values import is_int


@dataclass
class TaskConfig:
    """One task, `conf/task/<name>.yaml` with the header `# @package task.<name>`: the keys every
    task type reads. A type with keys of its own declares `Options`, a subclass of this one
    (`QuestionAnswering.Options` adds `stride`, ...); a task's file is checked against its
    type's `Options`, so a mistyped key is refused with the closest name."""

    type: str  # a task type: a built-in type's `type_name` or package.module.Class
    source: dict[str, Any]  # {bundled: name} | {path: file} | {hub: name, config: ...}
    batch_size: int = 32
    max_length: int = 256
    text_column: str = "text"
    label_column: str = "label"
    label_names: list[str] | None = None
    dev_fraction: float = 0.1
    max_train_examples: int | None = None  # a seeded sample of the train split (dev untouched)
    text_pair_column: str | None = None  # a second text, encoded as the tokenizer's pair input
    metrics: list[str] | None = None  # metric names (the first is the main one); null: the type's
    head: dict[str, Any] | None = None  # {_target_: ...}: a head of your own instead of the type's

    def check(self, name: str) -> None:
        """The value rules of the common keys (a subclass adds its own, calling this one)."""
        for key, low in (("batch_size", 1), ("max_length", 2)):
            if getattr(self, key) < low:
                raise MtlError(f"task.{name}.{key}={getattr(self, key)} must be >= {low}")
        if self.max_train_examples is not None and self.max_train_examples < 1:
            raise MtlError(
                f"task.{name}.max_train_examples={self.max_train_examples} must be >= 1 (or "
                "null: every training row)"
            )
        if not 0 < self.dev_fraction < 1:
            raise MtlError(f"task.{name}.dev_fraction={self.dev_fraction} must be in (0, 1)")
        if self.metrics is not None and not list(self.metrics):
            raise MtlError(
                f"task.{name}.metrics=[] names no metric; list at least one (the first is the "
                "main one), or leave it out for the type's defaults"
            )
        if self.label_names is not None and not list(self.label_names):
            raise MtlError(
                f"task.{name}.label_names=[] names no label; list the labels in order, or leave "
                "it out to read them from the data"
            )


class TaskType:
    """One kind of task. Built once per task from its config (an instance of its `Options`).

    Finding it: `type_name` is the short name a task file may give as `type:` (the built-in
    types exported by `mtl.task_types` are found by asking them theirs); `Options` is the
    dataclass of its config keys (`TaskConfig` or a subclass adding the type's own keys).

    Encoding: `encode` turns a batch of source rows into model rows with the columns
    `input_ids`, `labels`, `length` (tokens the samplers sort and budget by) and optionally
    `token_type_ids` and columns of its own; mtl adds `example_id` (the source row). An
    `encode` that makes several model rows per source row gives `example_id` itself, as each
    model row's position in the batch `rows`, which mtl turns into the source row.
    `dataset(split)` and `collator(...)` read and pad those rows; the defaults pad `input_ids`
    and `token_type_ids`, and `labels` with -100 when `token_labels` is true.
    Model: `make_head(hidden_size, num_labels, dropout)` returns an `nn.Module` with
    `forward(hidden [B, L, H], attention_mask [B, L]) -> logits` and `loss(logits, labels)`.
    Scoring: `predict(logits, batch)` gives one prediction per row (plain Python or numpy);
    `score(predictions, dev)` gets every dev row's prediction in row order and returns
    `{metric name: value}` for the task's `metrics` (the first one is the task's main metric).
    Metrics: `known_metrics` are the `Metric`s a task may name by their `name` (each knows
    whether higher is better: `metric_directions()`); `default_metrics` the names used when the
    config gives none. Export: `export_kind(label_names)` names the transformers model class
    the type's own head maps onto (None: none does). `squared_error`: the loss is a squared
    error (regression: the uncertainty balancer weighs it as a Gaussian likelihood).
    `writes_text`: prediction writes text with the decoder (`generation`: `mtl-predict` decodes
    greedily after each row's `encode_inputs` ids, and `readable` gets the text).
    """

    type_name: ClassVar[str] = ""
    Options: ClassVar[type[TaskConfig]] = TaskConfig
    known_metrics: ClassVar[tuple[Metric, ...]] = ()
    default_metrics: ClassVar[tuple[str, ...]] = ()
    label_dtype: ClassVar[type] = np.int64
    token_labels: ClassVar[bool] = False
    squared_error: ClassVar[bool] = False
    writes_text: ClassVar[bool] = False

    def __init__(self, name: str, config: Any) -> None:
        self.name = name
        self.config = config
        self.metrics = self.resolve_metrics(list(config.metrics or self.default_metrics), name)

    # -- data -------------------------------------------------------------------------------------

    def columns(self) -> list[str]:
        """The source columns this task reads (checked on every split)."""
        raise NotImplementedError

    def infer_label_names(self, labels: Sequence[Any]) -> list[str] | None:
        """Label names from the train labels when the config gives none (None: no classes)."""
        return None

    def check_rows(self, rows, tokenizer, where: str) -> None:
        """Refuse a split's source rows (a `Dataset` of the type's `columns()`) that cannot be
        encoded, before any is, in one line counting and naming them; none by default (`encode`
        refuses what it cannot read)."""

    def check_train_labels(self, train, where: str) -> None:
        """Refuse a train split (a `Dataset` of source rows) whose labels cannot teach this type
        anything, in one line (`MtlError`), once its rows are encoded (their own errors come
        first); by default any labels are fine."""

    def encode(
        self, rows: dict[str, list], tokenizer, label_names: list[str] | None, where: str
    ) -> dict[str, list]:
        """A batch of source rows (column -> values) -> model rows (see the class docstring).
        `where` names the rows in error messages ("task 'x', train split")."""
        raise NotImplementedError

    def dataset(self, split):
        """The torch dataset the samplers index over an encoded split (rows with
        `__getitems__`); by default `mtl.batching.TokenizedSplit`."""
        return TokenizedSplit(split)

    def collator(self, pad_token_id: int, pad_to_multiple_of: int | None = None):
        """Pads this task's rows into a batch (`mtl.batching.TaskCollator` by default). A batch
        has `input_ids`, `attention_mask`, `labels`, `task`, `example_ids`, `num_tokens`."""
        return TaskCollator(
            self.name,
            pad_token_id=pad_token_id,
            pad_to_multiple_of=pad_to_multiple_of,
            label_dtype=self.label_dtype,
            token_labels=self.token_labels,
        )

    # -- model ------------------------------------------------------------------------------------

    def num_labels(self, label_names: list[str] | None) -> int:
        return len(label_names or [])

    def default_head(self, hidden_size: int, num_labels: int, dropout: float) -> nn.Module:
        raise NotImplementedError

    def make_head(self, hidden_size: int, num_labels: int, dropout: float) -> nn.Module:
        """The task's head: `head: {_target_: ...}` from the config, else the type's own."""
        if self.config.head:
            check_targets(self.config.head, f"task.{self.name}.head", nn.Module)
            return instantiate(
                self.config.head, hidden_size=hidden_size, num_labels=num_labels, dropout=dropout
            )
        return self.default_head(hidden_size, num_labels, dropout)

    # -- scoring ----------------------------------------------------------------------------------

    def predict(self, logits: torch.Tensor, batch: dict) -> list[Any]:
        """One prediction per row of `batch` (default: the row's argmax)."""
        return logits.float().argmax(-1).cpu().tolist()

    def references(self, dev, label_names: list[str] | None) -> list[Any]:
        """What the metrics compare predictions with, one per dev row (default: the labels)."""
        return list(dev["labels"])

    def score(self, predictions: list[Any], dev, label_names: list[str] | None) -> dict:
        refs = self.references(dev, label_names)
        preds, refs = self.prepare(predictions, refs, label_names)
        return {name: float(fn(preds, refs)) for name, fn in self.metrics.items()}

    def prepare(self, predictions: list, references: list, label_names) -> tuple[Any, Any]:
        """Predictions and references in the form this type's metric functions read."""
        return np.asarray(predictions), np.asarray(references)

    # -- prediction (mtl-predict, rows without labels) ---------------------------------------

    def input_columns(self) -> list[str]:
        """The source columns prediction reads: `columns()` without the label column."""
        return [c for c in self.columns() if c != self.config.label_column]

    def dummy_labels(self, rows: dict[str, list], label_names) -> dict[str, list]:
        """Stand-in label columns for rows without labels, so that `encode` can read them."""
        n = len(rows[self.input_columns()[0]])
        return {self.config.label_column: [0] * n}

    def encode_inputs(
        self, rows: dict[str, list], tokenizer, label_names: list[str] | None, where: str
    ) -> dict[str, list]:
        """`encode` for rows without labels (their labels are `dummy_labels`, not used)."""
        return self.encode(
            {**rows, **self.dummy_labels(rows, label_names)}, tokenizer, label_names, where
        )

    def outputs(self, logits: torch.Tensor, batch: dict) -> list[Any]:
        """What `readable` reads of each row of `batch` (default: its logits as numpy)."""
        return list(logits.float().cpu().numpy())

    def readable(self, outputs: list, label_names, row: dict, encoded: list[dict]) -> dict:
        """{"prediction": ..., "score": ...} of one source row from the `outputs` of its model
        rows (and those rows as encoded); default: the class with the highest probability."""
        probs = softmax(np.asarray(outputs[0], dtype=np.float64))
        k = int(probs.argmax())
        return {"prediction": label_names[k], "score": float(probs[k])}

    def generates(self, evaluation: int | None) -> bool:
        """Whether the `evaluation`-th evaluation (None: the last) writes text for some rows
        with the decoder, scored by `score_generated(texts, completions)` (`generation` tasks
        do, with `generation_rows(size)` and `end_id`); no other built-in type does."""
        return False

    def configure_export(self, model, tokenizer) -> None:
        """Set what the standard transformers model of this task (`export_kind`) and its own
        copy of the tokenizer need beyond the weights before they are written (a causal LM's
        generation config, a chat template); nothing by default."""

    @property
    def main_metric(self) -> str:
        return next(iter(self.metrics))

    def metric_directions(self) -> dict[str, bool]:
        """{metric name: whether a higher value is better} of this task's metrics."""
        return {name: m.higher_is_better for name, m in self.metrics.items()}

    def export_kind(self, label_names: list[str] | None) -> Any:
        """The transformers counterpart of this type's own head
        (`mtl.models.heads.TransformersModel`), or None when no standard transformers model
        computes it (the default)."""
        return None

    @classmethod
    def resolve_metrics(cls, names: list[str], task: str = "?") -> dict[str, Metric]:
        """{logged name: Metric} for a task's `metrics:`: a name of one of `known_metrics`, or
        `package.module.function` (logged by its last part)."""
        if not names:
            raise MtlError(f"task {task!r}: metrics is empty; name at least one")
        known = {m.name: m for m in cls.known_metrics}
        resolved = {}
        for name in names:
            if name in known:
                resolved[name] = known[name]
            elif "." in name:
                short = name.rsplit(".", 1)[-1]
                found = import_target(name, f"task.{task}.metrics")
                if not callable(found):
                    raise MtlError(
                        f"task {task!r}: metric {name!r} is not a function; give "
                        "module.function of a function (predictions, references) -> float"
                    )
                resolved[short] = as_metric(found, short)
            else:
                raise MtlError(
                    f"task {task!r}: unknown metric {name!r} for {cls.__name__}; "
                    f"choose from {', '.join(known)} or give module.function"
                )
        return resolved


def check_targets(node: Any, key: str, kind: type) -> None:
    """Every `_target_` in `node` (nested ones too, which Hydra builds first) names a subclass
    of `kind`: imported and checked before `instantiate` calls anything."""
    if isinstance(node, Mapping):
        if "_target_" in node:
            import_target(node["_target_"], f"{key}._target_", kind)
        for name, value in node.items():
            if name != "_target_":
                check_targets(value, f"{key}.{name}", kind)
    elif isinstance(node, Sequence) and not isinstance(node, str):
        for i, value in enumerate(node):
            check_targets(value, f"{key}[{i}]", kind)


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis."""
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def label_id(label: Any, ids: dict[str, int], n: int, where: str) -> int:
    """A class label (name, or id in 0..n-1) as its id."""
    if isinstance(label, str):
        if label in ids:
            return ids[label]
    elif is_int(label) and 0 <= label < n:
        return int(label)
    raise MtlError(
        f"{where}: label {label!r} is not one of {list(ids)} (or an id in 0..{n - 1}); "
        "fix the data or label_names"
    )


def one_class(values: Sequence[Any], column: str, where: str) -> None:
    """The error for class labels that are all one class (a classifier learns nothing from them
    and scores 1.0 on a dev split alike)."""
    distinct = set(values)
    if len(distinct) == 1:
        raise MtlError(
            f"{where}: every label in column {column!r} is {next(iter(distinct))!r}, one class; a "
            "classifier needs rows of at least 2 classes (check label_column, or the data)"
        )


def names_from_values(values: Sequence[Any], where: str) -> list[str]:
    """Sorted distinct names, or "0".."max" for integer ids."""
    if all(isinstance(v, str) for v in values):
        return sorted(set(values))
    if all(is_int(v) and v >= 0 for v in values):
        return [str(i) for i in range(int(max(values)) + 1)]
    raise MtlError(
        f"{where}: labels must be all names (str) or all ids (int >= 0); give label_names"
    )
