"""Sentence (or sentence-pair) classification and regression: one label per row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import mtl.task_types.metrics as metrics
from mtl.errors import MtlError
from mtl.models.heads import RegressionHead, SequenceClassificationHead, TransformersModel
from mtl.task_types.base import TaskType, label_id, names_from_values, one_class


def encode_texts(config, rows: dict[str, list], tokenizer, where: str):
    """`text_column` alone, or with `text_pair_column` as the tokenizer's pair input (token type
    ids kept, `longest_first` truncation to `max_length`)."""
    texts = rows[config.text_column]
    if not all(isinstance(t, str) for t in texts):
        raise MtlError(f"{where}: column {config.text_column!r} must hold strings")
    if not config.text_pair_column:
        return tokenizer(texts, truncation=True, max_length=config.max_length)
    pairs = rows[config.text_pair_column]
    if not all(isinstance(t, str) for t in pairs):
        raise MtlError(f"{where}: column {config.text_pair_column!r} must hold strings")
    return tokenizer(texts, pairs, truncation="longest_first", max_length=config.max_length)


def text_columns(config) -> list[str]:
    """The columns of a one-text or text-pair task with one label cell per row."""
    pair = [config.text_pair_column] if config.text_pair_column else []
    return [config.text_column, *pair, config.label_column]


def label_config(label_names: list[str] | None) -> dict[str, Any]:
    """The transformers config keys of a task's classes (`num_labels`, `id2label`, ...)."""
    names = list(label_names or [])
    return {
        "num_labels": len(names),
        "id2label": dict(enumerate(names)),
        "label2id": {n: i for i, n in enumerate(names)},
    }


def model_rows(enc, labels: list) -> dict[str, list]:
    out = {"input_ids": enc["input_ids"], "labels": labels}
    if "token_type_ids" in enc:
        out["token_type_ids"] = enc["token_type_ids"]
    out["length"] = [len(ids) for ids in enc["input_ids"]]
    return out


class SequenceClassification(TaskType):
    """One class per text or text pair; cross-entropy over `label_names` (names or ids)."""

    type_name = "sequence_classification"
    known_metrics = (metrics.accuracy, metrics.f1, metrics.macro_f1, metrics.mcc)
    default_metrics = ("accuracy",)

    def columns(self) -> list[str]:
        return text_columns(self.config)

    def infer_label_names(self, labels: Sequence[Any]) -> list[str]:
        return names_from_values(labels, f"task {self.name!r}")

    def check_train_labels(self, train, where):
        if self.config.label_column in train.column_names:
            one_class(train[self.config.label_column], self.config.label_column, where)

    def encode(self, rows, tokenizer, label_names, where):
        enc = encode_texts(self.config, rows, tokenizer, where)
        ids = {name: i for i, name in enumerate(label_names)}
        labels = [label_id(x, ids, len(ids), where) for x in rows[self.config.label_column]]
        return model_rows(enc, labels)

    def default_head(self, hidden_size, num_labels, dropout):
        return SequenceClassificationHead(hidden_size, num_labels, dropout=dropout)

    def export_kind(self, label_names):
        config = {**label_config(label_names), "problem_type": "single_label_classification"}
        return TransformersModel("AutoModelForSequenceClassification", config, "classifier")


class Regression(TaskType):
    """One real value per text or text pair; mean squared error."""

    type_name = "regression"
    known_metrics = (metrics.pearson, metrics.spearman, metrics.mse)
    default_metrics = ("pearson", "spearman", "mse")
    label_dtype = np.float32
    squared_error = True

    def columns(self) -> list[str]:
        return text_columns(self.config)

    def check_train_labels(self, train, where):
        column = self.config.label_column
        if column in train.column_names and len(train) > 1:
            values = {_to_float(x, where) for x in train[column]}
            if len(values) == 1:
                raise MtlError(
                    f"{where}: every value in column {column!r} is {next(iter(values))!r}; a "
                    "regression learns nothing from a constant target (and its Pearson is "
                    "undefined): check label_column, or the data"
                )

    def encode(self, rows, tokenizer, label_names, where):
        enc = encode_texts(self.config, rows, tokenizer, where)
        return model_rows(enc, [_to_float(x, where) for x in rows[self.config.label_column]])

    def num_labels(self, label_names) -> int:
        return 1

    def default_head(self, hidden_size, num_labels, dropout):
        return RegressionHead(hidden_size, dropout=dropout)

    def export_kind(self, label_names):
        config = {"num_labels": 1, "problem_type": "regression"}
        return TransformersModel("AutoModelForSequenceClassification", config, "classifier")

    def predict(self, logits: torch.Tensor, batch: dict) -> list[float]:
        return logits.float().reshape(-1).cpu().tolist()

    def dummy_labels(self, rows, label_names):
        return {self.config.label_column: [0.0] * len(rows[self.config.text_column])}

    def readable(self, outputs, label_names, row, encoded):
        """The predicted value (no score)."""
        return {"prediction": float(np.asarray(outputs[0]).reshape(-1)[0])}


def _to_float(label: Any, where: str) -> float:
    try:
        return float(label)
    except (TypeError, ValueError):
        raise MtlError(f"{where}: regression label {label!r} is not a number") from None
