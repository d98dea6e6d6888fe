"""Token classification (tagging): one label per word, scored per span when tags are BIO."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

import mtl.task_types.metrics as metrics
from mtl.batching import IGNORE_INDEX
from mtl.errors import MtlError
from mtl.models.heads import TokenClassificationHead, TransformersModel
from mtl.task_types.base import TaskType, label_id, names_from_values, one_class, softmax
from mtl.task_types.classification import label_config


def is_bio(tags: Iterable[str]) -> bool:
    """Tags of the IOB2 scheme: "O" and "B-x"/"I-x"."""
    return all(t == "O" or t[:2] in ("B-", "I-") for t in tags)


def by_scheme(name: str, span_metric, tag_metric) -> metrics.Metric:
    """A tagging metric called `name`: per entity span when every tag is BIO, else per word."""

    def metric(predictions, references) -> float:
        tags = {t for rows in (predictions, references) for row in rows for t in row}
        return (span_metric if is_bio(tags) else tag_metric)(predictions, references)

    return metrics.Metric(metric, name, span_metric.higher_is_better)


class TokenClassification(TaskType):
    """A tag per word (`text_column`: a list of words, or a string split on whitespace).

    A word's tag goes to its first sub-token; the other positions get -100 and are not trained
    or scored. Metrics: with BIO tags `f1`/`precision`/`recall` are entity-span scores (strict
    IOB2, as seqeval computes them); with other tags they are per-word micro scores over every
    tag but "O". `accuracy` is per word.
    """

    type_name = "token_classification"
    known_metrics = (
        by_scheme("f1", metrics.span_f1, metrics.tag_f1),
        by_scheme("precision", metrics.span_precision, metrics.tag_precision),
        by_scheme("recall", metrics.span_recall, metrics.tag_recall),
        metrics.as_metric(metrics.token_accuracy, "accuracy"),
    )
    default_metrics = ("f1", "precision", "recall", "accuracy")
    token_labels = True

    def columns(self) -> list[str]:
        return [self.config.text_column, self.config.label_column]

    def infer_label_names(self, labels):
        return names_from_values([tag for tags in labels for tag in tags], f"task {self.name!r}")

    def check_train_labels(self, train, where):
        column = self.config.label_column
        if column in train.column_names:
            one_class([tag for tags in train[column] for tag in tags or []], column, where)

    def encode(self, rows, tokenizer, label_names, where):
        words = [_words(t) for t in rows[self.config.text_column]]
        tags = rows[self.config.label_column]
        for w, t in zip(words, tags, strict=True):
            if len(w) != len(t):
                raise MtlError(
                    f"{where}: the row {' '.join(w[:6])!r}... has {len(w)} words but {len(t)} "
                    "tags; give one tag per word"
                )
        enc = tokenizer(
            words, is_split_into_words=True, truncation=True, max_length=self.config.max_length
        )
        ids = {name: i for i, name in enumerate(label_names)}
        labels = []
        for row, row_tags in enumerate(tags):
            out, previous = [], None
            for word in enc.word_ids(row):
                first = word is not None and word != previous
                out.append(
                    label_id(row_tags[word], ids, len(ids), where) if first else IGNORE_INDEX
                )
                previous = word
            labels.append(out)
        return {
            "input_ids": enc["input_ids"],
            "labels": labels,
            "length": [len(x) for x in enc["input_ids"]],
        }

    def default_head(self, hidden_size, num_labels, dropout):
        return TokenClassificationHead(hidden_size, num_labels, dropout=dropout)

    def export_kind(self, label_names):
        config = label_config(label_names)
        return TransformersModel("AutoModelForTokenClassification", config, "classifier")

    def predict(self, logits: torch.Tensor, batch: dict) -> list[list[int]]:
        """The tag id of every scored word (positions whose label is not -100)."""
        labels = batch["labels"]
        pred = logits[:, : labels.shape[1]].float().argmax(-1).cpu().numpy()
        keep = (labels != IGNORE_INDEX).cpu().numpy()
        return [row[mask].tolist() for row, mask in zip(pred, keep, strict=True)]

    def dummy_labels(self, rows, label_names):
        texts = rows[self.config.text_column]
        return {self.config.label_column: [[0] * len(_words(t)) for t in texts]}

    def outputs(self, logits: torch.Tensor, batch: dict) -> list:
        """The logits [words, tags] of every scored word (first sub-token) of each row."""
        labels = batch["labels"]
        scores = logits[:, : labels.shape[1]].float().cpu().numpy()
        keep = (labels != IGNORE_INDEX).cpu().numpy()
        return [row[mask] for row, mask in zip(scores, keep, strict=True)]

    def readable(self, outputs, label_names, row, encoded):
        """A tag per word (words past `max_length` get none), and each tag's probability."""
        probs = softmax(np.asarray(outputs[0], dtype=np.float64))
        best = probs.argmax(-1)
        return {
            "prediction": [label_names[k] for k in best],
            "score": [float(p[k]) for p, k in zip(probs, best, strict=True)],
        }

    def references(self, dev, label_names):
        return [[t for t in row if t != IGNORE_INDEX] for row in dev["labels"]]

    def prepare(self, predictions, references, label_names):
        """Tag names per scored word, for predictions and references alike."""
        return (
            [[label_names[i] for i in row] for row in predictions],
            [[label_names[i] for i in row] for row in references],
        )


def _words(text) -> list:
    """A row's words: a list as given, or a string split on whitespace."""
    return text.split() if isinstance(text, str) else list(text)
