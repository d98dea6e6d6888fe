"""Multi-label classification: any number of classes per text or text pair."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import mtl.task_types.metrics as metrics
from mtl.errors import MtlError
from mtl.models.heads import MultiLabelHead, TransformersModel
from mtl.task_types.base import TaskType, label_id, names_from_values
from mtl.task_types.classification import encode_texts, label_config, model_rows, text_columns


def multi_hot_split(data):
    """A `TokenizedSplit` whose list-typed labels hold one multi-hot row [K] per example (not
    one label per token), changed in place so that `labels[i]` is Float[K] and a batch's
    labels are Float[B, K]."""
    return data.row_labels(np.float32)


class MultiLabelCollator:
    """A `TaskCollator` whose `labels` come out Float[B, K] (multi-hot rows, packed or given per
    example: `PackedRows.from_examples` joins per-example label arrays end to end)."""

    def __init__(self, collate) -> None:
        self.collate = collate

    def __call__(self, examples) -> dict[str, Any]:
        batch = self.collate(examples)
        batch["labels"] = batch["labels"].reshape(len(batch["example_ids"]), -1)
        return batch

    def __repr__(self) -> str:
        return f"MultiLabelCollator({self.collate!r})"


class MultiLabelClassification(TaskType):
    """A set of classes per text or text pair (`text_column`, optional `text_pair_column`).

    `label_column` holds a list of label names or ids per row (an empty list: no label);
    `label_names` default to the sorted distinct train names (for ids, "0".."max"). The head
    gives one logit per label with binary cross-entropy; a label is predicted when its sigmoid
    is above 0.5. Predictions and references are 0/1 indicator rows [K]. Metrics: `micro_f1`
    (over every example-label cell), `macro_f1` (mean of the per-label F1), `subset_accuracy`
    (the whole set right), as scikit-learn computes them for indicator matrices.
    """

    type_name = "multi_label_classification"
    known_metrics = (
        metrics.micro_f1,
        metrics.as_metric(metrics.macro_f1_multilabel, "macro_f1"),
        metrics.subset_accuracy,
    )
    default_metrics = ("micro_f1", "macro_f1", "subset_accuracy")
    label_dtype = np.float32

    def columns(self) -> list[str]:
        return text_columns(self.config)

    def check_train_labels(self, train, where):
        column = self.config.label_column
        if column in train.column_names and len(train) > 1:
            sets = {frozenset(self._cell(cell, where)) for cell in train[column]}
            if len(sets) == 1:
                shown = sorted(next(iter(sets)), key=str)
                raise MtlError(
                    f"{where}: every row in column {column!r} has the label set {shown}; a "
                    "multi-label classifier needs rows whose sets differ (check label_column, "
                    "or the data)"
                )

    def infer_label_names(self, labels: Sequence[Any]) -> list[str]:
        where = f"task {self.name!r}, train split"
        values = [x for cell in labels for x in self._cell(cell, where)]
        if not values:
            raise MtlError(f"{where}: no row has a label; give label_names")
        return names_from_values(values, f"task {self.name!r}")

    def encode(self, rows, tokenizer, label_names, where):
        enc = encode_texts(self.config, rows, tokenizer, where)
        ids = {name: i for i, name in enumerate(label_names)}
        labels = []
        for cell in rows[self.config.label_column]:
            hot = [0.0] * len(ids)
            for label in self._cell(cell, where):
                hot[label_id(label, ids, len(ids), where)] = 1.0
            labels.append(hot)
        return model_rows(enc, labels)

    def _cell(self, cell: Any, where: str) -> list:
        if not isinstance(cell, (list, tuple)):
            raise MtlError(
                f"{where}: column {self.config.label_column!r} holds {cell!r}, not a list; "
                "give each row a list of label names or ids"
            )
        return list(cell)

    def dataset(self, split):
        return multi_hot_split(super().dataset(split))

    def collator(self, pad_token_id: int, pad_to_multiple_of: int | None = None):
        return MultiLabelCollator(super().collator(pad_token_id, pad_to_multiple_of))

    def default_head(self, hidden_size, num_labels, dropout):
        return MultiLabelHead(hidden_size, num_labels, dropout=dropout)

    def export_kind(self, label_names):
        config = {**label_config(label_names), "problem_type": "multi_label_classification"}
        return TransformersModel("AutoModelForSequenceClassification", config, "classifier")

    def predict(self, logits: torch.Tensor, batch: dict) -> list[list[int]]:
        """The 0/1 indicator row of every example: label k where sigmoid(logit k) > 0.5."""
        return (torch.sigmoid(logits.float()) > 0.5).int().cpu().tolist()

    def dummy_labels(self, rows, label_names):
        return {self.config.label_column: [[] for _ in rows[self.config.text_column]]}

    def readable(self, outputs, label_names, row, encoded):
        """The labels whose probability is above 0.5, and those probabilities."""
        probs = 1 / (1 + np.exp(-np.asarray(outputs[0], dtype=np.float64)))
        chosen = [k for k, p in enumerate(probs) if p > 0.5]
        return {
            "prediction": [label_names[k] for k in chosen],
            "score": [float(probs[k]) for k in chosen],
        }

    def prepare(self, predictions, references, label_names):
        k = len(label_names)
        return (
            np.asarray(predictions, dtype=np.int64).reshape(-1, k),
            np.asarray(references, dtype=np.int64).reshape(-1, k),
        )
