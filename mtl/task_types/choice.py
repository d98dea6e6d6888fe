"""Multiple choice (SWAG-style): pick the right one of a row's choices, any number per row.

Encoding (as transformers' run_swag.py): every choice is the tokenizer's pair
(context, question + " " + choice), or (context, choice) without `question_column`, truncated
`longest_first` to `max_length`. A source row stays one model row, its choices' tokens end to
end with their lengths in `choice_lengths`, so a batch always holds whole examples.

Batches: the choices become the rows. A batch of B examples whose largest choice count is C has
B * C rows, example b's choice j in row b * C + j; an example with fewer choices is filled up
with empty rows (attention mask all 0), which the head scores -inf-like. The head sees only
(hidden, attention_mask) and (scores, labels), and recovers C as rows / len(labels). This also
holds in a mixed batch: `MixupLoader` keeps a task's rows together in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset as TorchDataset

import mtl.task_types.metrics as metrics
from mtl.batching import (
    PackedRows,
    TaskCollator,
    TokenizedSplit,
    arrow_table,
    flat_list_column,
)
from mtl.errors import MtlError
from mtl.models.heads import MultipleChoiceHead, TransformersModel, by_example
from mtl.task_types.base import TaskConfig, TaskType, softmax
from mtl.values import is_int


@dataclass
class ChoiceRows:
    """A batch of multiple-choice examples, unpadded: what `ChoiceSplit.__getitems__` returns.

    `input_ids` (and `token_type_ids`) hold every choice's tokens, choice after choice and
    example after example; `choice_lengths` the token count of each of those choices;
    `num_choices`, `labels` (right choice) and `example_ids` one value per example.
    """

    input_ids: np.ndarray
    choice_lengths: np.ndarray
    num_choices: np.ndarray
    labels: np.ndarray
    example_ids: np.ndarray
    token_type_ids: np.ndarray | None = None

    @classmethod
    def from_examples(cls, examples: Sequence[Mapping[str, Any]]) -> ChoiceRows:
        """Pack per-example dicts (`ChoiceSplit[i]`)."""
        if not examples:
            raise MtlError("cannot collate an empty batch; the sampler yielded no indices")

        def cat(key: str) -> np.ndarray:
            return np.concatenate([np.asarray(e[key], dtype=np.int64) for e in examples])

        return cls(
            input_ids=cat("input_ids"),
            choice_lengths=cat("choice_lengths"),
            num_choices=np.array([len(e["choice_lengths"]) for e in examples], dtype=np.int64),
            labels=np.array([e["labels"] for e in examples]),
            example_ids=np.array([e["example_id"] for e in examples], dtype=np.int64),
            token_type_ids=cat("token_type_ids") if "token_type_ids" in examples[0] else None,
        )


class ChoiceSplit(TorchDataset):
    """An encoded multiple-choice split as numpy arrays: a `mtl.batching.TokenizedSplit` plus each
    example's `choice_lengths`. Item i: {"input_ids", "choice_lengths", "labels", "example_id",
    ("token_type_ids")}; `__getitems__` gives a `ChoiceRows`."""

    def __init__(self, ds) -> None:
        table = arrow_table(ds)
        self.split = TokenizedSplit(table)
        lengths, self.choice_offsets = flat_list_column(table, "choice_lengths")
        self.choice_lengths = lengths.astype(np.int64)

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = self.split[index]
        start, end = self.choice_offsets[index], self.choice_offsets[index + 1]
        item["choice_lengths"] = self.choice_lengths[start:end]
        return item

    def __getitems__(self, indices: list[int]) -> ChoiceRows:
        packed = self.split.__getitems__(indices)
        rows = np.asarray(indices, dtype=np.int64)
        starts = self.choice_offsets[rows]
        counts = self.choice_offsets[rows + 1] - starts
        first = np.cumsum(counts) - counts
        positions = np.arange(counts.sum()) + np.repeat(starts - first, counts)
        return ChoiceRows(
            packed.input_ids,
            self.choice_lengths[positions],
            counts,
            packed.labels,
            packed.example_ids,
            packed.token_type_ids,
        )


class ChoiceCollator:
    """Pads a batch of multiple-choice examples: one row per choice (see the module docstring),
    padded by a `mtl.batching.TaskCollator`.

    Output: {"input_ids"/"attention_mask"/("token_type_ids"): Long[B * C, T], "labels": Long[B]
    (the right choice), "task", "example_ids": Long[B * C] (each row's example, so that mixed
    batches keep one id per row), "num_tokens": real tokens}; filler rows have length 0.
    """

    def __init__(
        self, task_name: str, *, pad_token_id: int, pad_to_multiple_of: int | None = None
    ) -> None:
        self.task_name = task_name
        self.pad = TaskCollator(
            task_name, pad_token_id=pad_token_id, pad_to_multiple_of=pad_to_multiple_of
        )

    def __call__(self, examples: ChoiceRows | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        rows = examples if isinstance(examples, ChoiceRows) else ChoiceRows.from_examples(examples)
        n, width = len(rows.num_choices), int(rows.num_choices.max())
        # Example b's choice j goes to row b * width + j; the rest stay empty.
        first = np.cumsum(rows.num_choices) - rows.num_choices
        example = np.repeat(np.arange(n), rows.num_choices)
        slot = example * width + np.arange(len(example)) - np.repeat(first, rows.num_choices)
        lengths = np.zeros(n * width, dtype=np.int64)
        lengths[slot] = rows.choice_lengths
        packed = PackedRows(
            rows.input_ids,
            lengths,
            rows.labels,
            np.repeat(rows.example_ids, width),
            rows.token_type_ids,
        )
        return self.pad(packed)

    def __repr__(self) -> str:
        return f"ChoiceCollator({self.pad!r})"


class MultipleChoice(TaskType):
    """The right one of each row's choices (`choices_column`: a list of strings, any number per
    row), given `text_column` (context) and, if set, `question_column`. `label_column` holds the
    right choice's index. One score per choice, softmax cross-entropy over the row's choices;
    predictions are the argmax choice, scored by `accuracy`."""

    @dataclass
    class Options(TaskConfig):
        """The common keys, and the columns of the choices and (optional) question."""

        choices_column: str | None = None  # a list of strings per row
        question_column: str | None = None  # put before each choice, if set

    type_name = "multiple_choice"
    known_metrics = (metrics.accuracy,)
    default_metrics = ("accuracy",)

    def __init__(self, name: str, config: Any) -> None:
        super().__init__(name, config)
        if not config.choices_column:
            raise MtlError(
                f"task {name!r}: multiple_choice needs choices_column; set it to the column "
                "holding each row's list of choices"
            )

    def columns(self) -> list[str]:
        c = self.config
        question = [c.question_column] if c.question_column else []
        return [c.text_column, *question, c.choices_column, c.label_column]

    def check_train_labels(self, train, where):
        column = self.config.label_column
        if column in train.column_names and len(train) > 1:
            answers = set(train[column])
            if len(answers) == 1:
                raise MtlError(
                    f"{where}: every row's answer (column {column!r}) is choice "
                    f"{next(iter(answers))!r}; a model learns the position, not the task: put "
                    "the right choice at different positions (check label_column, or the data)"
                )

    def encode(self, rows, tokenizer, label_names, where):
        c = self.config
        contexts = _strings(rows[c.text_column], c.text_column, where)
        questions = (
            _strings(rows[c.question_column], c.question_column, where)
            if c.question_column
            else None
        )
        firsts, seconds, counts, labels = [], [], [], []
        for i, (context, choices, label) in enumerate(
            zip(contexts, rows[c.choices_column], rows[c.label_column], strict=True)
        ):
            _check_choices(choices, context, c.choices_column, where)
            labels.append(_choice_index(label, len(choices), context, where))
            counts.append(len(choices))
            firsts.extend([context] * len(choices))
            seconds.extend(f"{questions[i]} {x}" if questions else x for x in choices)
        enc = tokenizer(firsts, seconds, truncation="longest_first", max_length=c.max_length)
        ends = np.cumsum(counts).tolist()
        spans = list(zip([0, *ends[:-1]], ends, strict=True))

        def per_row(values: list[list[int]]) -> list[list[int]]:
            return [[t for ids in values[a:b] for t in ids] for a, b in spans]

        choice_lengths = [[len(ids) for ids in enc["input_ids"][a:b]] for a, b in spans]
        out = {
            "input_ids": per_row(enc["input_ids"]),
            "choice_lengths": choice_lengths,
            "labels": labels,
            # What the row costs in a padded batch: its choices times its longest choice.
            "length": [len(x) * max(x) for x in choice_lengths],
        }
        if "token_type_ids" in enc:
            out["token_type_ids"] = per_row(enc["token_type_ids"])
        return out

    def dataset(self, split) -> ChoiceSplit:
        return ChoiceSplit(split)

    def collator(self, pad_token_id: int, pad_to_multiple_of: int | None = None):
        return ChoiceCollator(
            self.name, pad_token_id=pad_token_id, pad_to_multiple_of=pad_to_multiple_of
        )

    def num_labels(self, label_names) -> int:
        return 1

    def default_head(self, hidden_size, num_labels, dropout):
        return MultipleChoiceHead(hidden_size, dropout=dropout)

    def export_kind(self, label_names):
        return TransformersModel("AutoModelForMultipleChoice", {}, "classifier")

    def predict(self, logits: torch.Tensor, batch: dict) -> list[int]:
        """The index of each example's best-scored choice."""
        return by_example(logits.float(), len(batch["labels"])).argmax(-1).cpu().tolist()

    def outputs(self, logits: torch.Tensor, batch: dict) -> list:
        """The scores [C] of each example's choices (filler choices included)."""
        return list(by_example(logits.float(), len(batch["labels"])).cpu().numpy())

    def readable(self, outputs, label_names, row, encoded):
        """The best choice ({"index", "text"}) and its probability over the row's choices."""
        n = len(encoded[0]["choice_lengths"])
        probs = softmax(np.asarray(outputs[0][:n], dtype=np.float64))
        k = int(probs.argmax())
        return {
            "prediction": {"index": k, "text": row[self.config.choices_column][k]},
            "score": float(probs[k]),
        }


def _strings(values: list, column: str, where: str) -> list[str]:
    if not all(isinstance(v, str) for v in values):
        raise MtlError(f"{where}: column {column!r} must hold strings")
    return values


def _check_choices(choices: Any, context: str, column: str, where: str) -> None:
    row = f"the row {context[:40]!r}..."
    if not isinstance(choices, (list, tuple)) or not all(isinstance(x, str) for x in choices):
        raise MtlError(
            f"{where}: {row} has {column}={choices!r}; give a list of strings (the choices)"
        )
    if not choices:
        raise MtlError(f"{where}: {row} has no choices in {column!r}; give at least one")


def _choice_index(label: Any, n: int, context: str, where: str) -> int:
    if is_int(label) and 0 <= label < n:
        return int(label)
    raise MtlError(
        f"{where}: the row {context[:40]!r}... has label {label!r}, not a choice index in "
        f"0..{n - 1}; give the index of the right choice"
    )
