"""Extractive question answering (SQuAD schema): the answer is a span of the context.

Encoding follows transformers' `run_qa.py`: the question and the context go to the tokenizer as
a pair, truncated on the context only, and a context too long for `max_length` is split into
windows whose consecutive ones share `stride` tokens (unset: a quarter of `max_length`, so any
`max_length` has a stride that fits; 128 at 512). Each window is one model row, labelled
with the (start token, end token) of the answer, or (0, 0), the [CLS] position, when the answer is
not wholly inside the window or the question has none (SQuAD 2.0). Predictions go back to text
through the windows' character offsets (`utils_qa.postprocess_qa_predictions`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import torch

import mtl.task_types.metrics as metrics
from mtl.errors import MtlError
from mtl.models.heads import QuestionAnsweringHead, TransformersModel
from mtl.task_types.base import TaskConfig, TaskType
from mtl.values import is_int

NO_ANSWER = (0, 0)  # start and end at [CLS], the first token
OUTSIDE = -1  # the character offset stored for a token outside the context


class QuestionAnswering(TaskType):
    """Extractive QA over `question_column`, `context_column` and `answers_column`
    (`{"text": [str, ...], "answer_start": [int, ...]}`, empty lists for an unanswerable
    question; default column names: question, context, answers). `stride`: the tokens
    consecutive windows of a long context share; unset (null), `max_length // 4`.

    Rows: one per window of a context (`example_id`: the source row), labels (start, end)
    token of the first gold answer, (0, 0) where the window does not hold it. The encoded split
    keeps what scoring needs: `offset_start`/`offset_end` (each token's characters in the context,
    -1 outside it), `context` and `answer_texts` (every gold answer of the source row, as a JSON
    list: a list column whose first encoding batch is all unanswerable would be typed null).
    Batches: labels Long[B, 2]; the head gives start and end logits [B, L, 2].

    Prediction, per question over all its windows: the span (start <= end, at most
    `max_answer_length` = 30 tokens, inside the context) with the highest start + end logit
    (an exact search over all such spans, not run_qa's top-20 candidates). When the scored
    split has an unanswerable question (SQuAD 2.0 data) the answer is "" if the null score (the
    lowest [CLS] start + end over the question's windows, as run_qa takes it) exceeds the best
    span's score by more than `null_threshold` (0). Metrics: `exact_match` and `f1` (SQuAD's,
    against every gold answer of the question).
    """

    @dataclass
    class Options(TaskConfig):
        """The common keys, and the QA columns (null: question, context, answers) and `stride`."""

        question_column: str | None = None
        context_column: str | None = None  # the passage answers are taken from
        answers_column: str | None = None  # {text: [...], answer_start: [...]}
        # tokens shared by consecutive windows of a long context; null: max_length // 4
        stride: int | None = None

    type_name = "question_answering"
    known_metrics = (metrics.exact_match, metrics.as_metric(metrics.squad_f1, "f1"))
    default_metrics = ("exact_match", "f1")
    max_answer_length: ClassVar[int] = 30
    null_threshold: ClassVar[float] = 0.0

    def __init__(self, name: str, config: Any) -> None:
        super().__init__(name, config)
        self.question_column = config.question_column or "question"
        self.context_column = config.context_column or "context"
        self.answers_column = config.answers_column or "answers"
        self.stride = config.max_length // 4 if config.stride is None else config.stride
        if not 0 <= self.stride < config.max_length:
            raise MtlError(
                f"task.{name}.stride={self.stride} must be >= 0 and below "
                f"max_length={config.max_length}; it counts the tokens consecutive windows share "
                "(leave it unset for max_length // 4)"
            )

    # -- data -------------------------------------------------------------------------------------

    def columns(self) -> list[str]:
        return [self.question_column, self.context_column, self.answers_column]

    def encode(self, rows, tokenizer, label_names, where):
        questions = [q.lstrip() for q in _strings(rows, self.question_column, where)]
        contexts = _strings(rows, self.context_column, where)
        golds = [
            gold_answers(cell, context, self.answers_column, where)
            for cell, context in zip(rows[self.answers_column], contexts, strict=True)
        ]
        self._check_room(questions, tokenizer, where)
        enc = tokenizer(
            questions,
            contexts,
            truncation="only_second",
            max_length=self.config.max_length,
            stride=self.stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        out: dict[str, list] = {"input_ids": enc["input_ids"]}
        if "token_type_ids" in enc:
            out["token_type_ids"] = enc["token_type_ids"]
        out.update(labels=[], offset_start=[], offset_end=[], context=[], answer_texts=[])
        out["example_id"] = list(enc["overflow_to_sample_mapping"])  # positions in `rows`
        for window, source in enumerate(out["example_id"]):
            in_context = [s == 1 for s in enc.sequence_ids(window)]
            spans = enc["offset_mapping"][window]
            starts = [a if c else OUTSIDE for (a, _), c in zip(spans, in_context, strict=True)]
            ends = [b if c else OUTSIDE for (_, b), c in zip(spans, in_context, strict=True)]
            texts, answer_starts = golds[source]
            label = (
                span_label(starts, ends, answer_starts[0], answer_starts[0] + len(texts[0]))
                if texts
                else NO_ANSWER
            )
            out["labels"].append(list(label))
            out["offset_start"].append(starts)
            out["offset_end"].append(ends)
            out["context"].append(contexts[source])
            out["answer_texts"].append(json.dumps(texts))
        out["length"] = [len(ids) for ids in enc["input_ids"]]
        return out

    def _check_room(self, questions: list[str], tokenizer, where: str) -> None:
        """The tokenizer needs room for more than `stride` context tokens beside each question
        (else it panics); say so in one line instead."""
        longest = max(len(ids) for ids in tokenizer(questions, add_special_tokens=False).input_ids)
        room = self.config.max_length - longest - tokenizer.num_special_tokens_to_add(pair=True)
        if room <= self.stride:
            raise MtlError(
                f"{where}: a question of {longest} tokens leaves {room} context tokens per "
                f"window of max_length={self.config.max_length}, not more than "
                f"stride={self.stride}; raise max_length or lower stride"
            )

    def dataset(self, split):
        """The default rows, with labels Int[2] (start, end) per row instead of per token."""
        return super().dataset(split).row_labels()

    def collator(self, pad_token_id: int, pad_to_multiple_of: int | None = None):
        return PairLabels(super().collator(pad_token_id, pad_to_multiple_of))

    # -- model ------------------------------------------------------------------------------------

    def num_labels(self, label_names) -> int:
        return 2

    def default_head(self, hidden_size, num_labels, dropout):
        return QuestionAnsweringHead(hidden_size, dropout=dropout)

    def export_kind(self, label_names):
        return TransformersModel("AutoModelForQuestionAnswering", {"num_labels": 2}, "qa_outputs")

    # -- scoring ----------------------------------------------------------------------------------

    def predict(self, logits: torch.Tensor, batch: dict) -> list[tuple[np.ndarray, np.ndarray]]:
        """(start logits, end logits) of each row, as float32 arrays of the row's length."""
        lengths = batch["attention_mask"].sum(1).tolist()
        scores = logits.float().cpu().numpy()
        return [(scores[i, :n, 0].copy(), scores[i, :n, 1].copy()) for i, n in enumerate(lengths)]

    def input_columns(self) -> list[str]:
        return [self.question_column, self.context_column]

    def dummy_labels(self, rows, label_names):
        n = len(rows[self.question_column])
        return {self.answers_column: [{"text": [], "answer_start": []} for _ in range(n)]}

    def outputs(self, logits: torch.Tensor, batch: dict) -> list:
        return self.predict(logits, batch)

    def readable(self, outputs, label_names, row, encoded):
        """The best span over the question's windows (as in `answers`, never "") and its score
        (start + end logit)."""
        best = (-np.inf, "")
        for (start_logits, end_logits), window in zip(outputs, encoded, strict=True):
            starts = np.asarray(window["offset_start"][: len(start_logits)])
            ends = np.asarray(window["offset_end"][: len(start_logits)])
            span = best_span(start_logits, end_logits, starts != OUTSIDE, self.max_answer_length)
            if span is not None and span[0] > best[0]:
                score, s, e = span
                best = (score, window["context"][starts[s] : ends[e]])
        return {"prediction": best[1], "score": float(best[0]) if best[1] else None}

    def references(self, dev, label_names) -> list[list[str]]:
        """The gold answer texts of each question ([] when it has none), in source row order."""
        first = _first_windows(dev)
        texts = dev["answer_texts"]
        return [json.loads(texts[row]) for row in first]

    def score(self, predictions, dev, label_names) -> dict:
        refs = self.references(dev, label_names)
        answers = self.answers(predictions, dev, no_answer=any(not golds for golds in refs))
        return {name: float(fn(answers, refs)) for name, fn in self.metrics.items()}

    def answers(self, predictions, dev, no_answer: bool = False) -> list[str]:
        """The answer text of each question from every window's (start, end) logits (rows of
        `dev` in order); "" allowed only with `no_answer` (see the class docstring)."""
        if len(predictions) != len(dev):
            raise MtlError(
                f"task {self.name!r}: {len(predictions)} predictions for {len(dev)} windows; "
                "give one (start logits, end logits) pair per row"
            )
        example_ids = np.asarray(dev["example_id"])
        token_starts, offsets = _flat_list(dev, "offset_start")
        token_ends, _ = _flat_list(dev, "offset_end")
        contexts = dev["context"]
        best: dict[int, tuple[float, str]] = {}
        null: dict[int, float] = {}
        for row, (start_logits, end_logits) in enumerate(predictions):
            a = offsets[row]
            starts = token_starts[a : a + len(start_logits)]
            ends = token_ends[a : a + len(start_logits)]
            example = int(example_ids[row])
            null[example] = min(null.get(example, np.inf), start_logits[0] + end_logits[0])
            span = best_span(start_logits, end_logits, starts != OUTSIDE, self.max_answer_length)
            if span is not None and span[0] > best.get(example, (-np.inf, ""))[0]:
                score, s, e = span
                best[example] = (score, contexts[row][starts[s] : ends[e]])
        out = []
        for example in dict.fromkeys(example_ids.tolist()):
            score, text = best.get(example, (-np.inf, ""))
            if no_answer and null[example] - score > self.null_threshold:
                text = ""
            out.append(text)
        return out


class PairLabels:
    """A collator whose batches carry labels Long[B, 2] also when given per-example dicts
    (whose 2-element labels the default collator would join end to end)."""

    def __init__(self, collator) -> None:
        self.collator = collator

    def __call__(self, examples) -> dict[str, Any]:
        batch = self.collator(examples)
        batch["labels"] = batch["labels"].reshape(-1, 2)
        return batch

    def __repr__(self) -> str:
        return f"PairLabels({self.collator!r})"


def gold_answers(cell: Any, context: str, column: str, where: str) -> tuple[list[str], list[int]]:
    """(texts, answer_starts) of an answers cell, checked against its context."""
    texts = cell.get("text") if isinstance(cell, Mapping) else None
    starts = cell.get("answer_start") if isinstance(cell, Mapping) else None
    if not (
        _is_list(texts)
        and _is_list(starts)
        and len(texts) == len(starts)
        and all(isinstance(t, str) and t for t in texts)
        and all(is_int(s) for s in starts)
    ):
        raise MtlError(
            f"{where}: the {column!r} cell {_short(cell)} is not in the SQuAD form; give "
            "{'text': [str, ...], 'answer_start': [int, ...]} (empty lists: no answer)"
        )
    for text, start in zip(texts, starts, strict=True):
        found = context[start : start + len(text)] if start >= 0 else None
        if found != text:
            raise MtlError(
                f"{where}: answer {_short(text)} is not at answer_start={start} of its context "
                f"(which has {_short(found)} there); fix answer_start, the answer's character "
                "offset in the context"
            )
    return list(texts), [int(s) for s in starts]


def span_label(starts: list[int], ends: list[int], start_char: int, end_char: int):
    """(start token, end token) of the characters [start_char, end_char) in a window whose
    context tokens cover [starts[k], ends[k]) (-1 outside the context); (0, 0) when the window
    does not hold them all (run_qa.py's rule)."""
    context = [k for k, s in enumerate(starts) if s != OUTSIDE]
    if not context:
        return NO_ANSWER
    first, last = context[0], context[-1]
    if not (starts[first] <= start_char and ends[last] >= end_char):
        return NO_ANSWER
    start = first
    while start <= last and starts[start] <= start_char:
        start += 1
    end = last
    while end >= first and ends[end] >= end_char:
        end -= 1
    return start - 1, end + 1


def best_span(start_logits, end_logits, valid, max_length: int):
    """(score, start, end) of the best span with start <= end < start + max_length, both tokens
    `valid` (inside the context), by start + end logit; None when there is none."""
    start_scores = np.where(valid, start_logits, -np.inf)
    end_scores = np.where(valid, end_logits, -np.inf)
    n, best = len(start_scores), None
    for width in range(min(max_length, n)):
        totals = start_scores[: n - width] + end_scores[width:]
        k = int(np.argmax(totals))
        if totals[k] > -np.inf and (best is None or totals[k] > best[0]):
            best = (float(totals[k]), k, k + width)
    return best


def _first_windows(dev) -> np.ndarray:
    """The first row of each source row, in source row order."""
    _, first = np.unique(np.asarray(dev["example_id"]), return_index=True)
    return first


def _flat_list(dev, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of a list column: row i is values[offsets[i]:offsets[i + 1]]."""
    array = dev.with_format("arrow")[column]
    array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
    lengths = array.value_lengths().to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return array.flatten().to_numpy(zero_copy_only=False), offsets


def _strings(rows: dict[str, list], column: str, where: str) -> list[str]:
    values = rows[column]
    if not all(isinstance(v, str) for v in values):
        raise MtlError(f"{where}: column {column!r} must hold strings")
    return values


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
