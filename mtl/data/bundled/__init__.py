"""Bundled tasks: real ones from CPython's own reference text, and small generated ones for tests.

Nothing here downloads. Each bundled task is the source `{"bundled": name, ...options}` of a
task config (`build_task_from_config`); `bundled_rows(name, seed=..., **options)` returns
`(task_type, label_names, train, dev)` with rows in the columns of the task type
(`{"text": ..., "label": ...}` for the single-text ones) and a split that depends only on the
seed and the options.

The pydoc tasks
---------------
`pydoc_data.topics` ships with every CPython: the 79 help topics of the language reference as
plain text. It is split into paragraphs on blank lines; headings and ASCII tables are dropped, and
a paragraph that occurs in several topics ("compound" repeats "if", "for", ...; "specialnames"
repeats "customization", ...) is kept once, under its most specific (smallest) topic. That leaves
1,833 paragraphs on Python 3.11; with the MiniLM tokenizer their lengths are long-tailed: median
35 tokens, mean 46, 95th percentile 127, 7 cut at max_length 256. The split is by paragraph,
seeded, 85/15 by default (`dev_fraction`), and the same for the three tasks. Figures below are
for Python 3.11 and seed 0 (1,558 train / 275 dev); other Python versions ship slightly
different text, and a topic missing from `TOPIC_CLASSES` is skipped with a warning.

- `pydoc_topic` (sequence_classification, 9 classes): which part of the reference a paragraph
  comes from. `TOPIC_CLASSES` maps every topic to one of: builtin_types, compound_statements,
  data_model, debugger, execution_model, expressions, lexical, simple_statements,
  strings_formatting. Chance: the majority class (data_model) scores 25.5% dev accuracy
  (70/275); uniform guessing 11.1%.
- `pydoc_code` (token_classification, tags CODE/O): the text marks code two ways: "double
  quotes" around inline code, and indented code blocks (examples, grammar rules, doctests) or
  signature lines ("str.count(sub[, start[, end]])" above its indented description). The
  delimiting quotes are removed and each whitespace-separated word is tagged CODE if it was
  quoted or in a code block/signature, else O: the model has to tell code from the words alone.
  Blocks are found by a heuristic (an indented paragraph that does not read as prose, any
  doctest or grammar rule); quotes inside code blocks are real Python and are kept.
  15.5% of train words (13.3% of dev words) are CODE. Chance: tagging every word CODE gives a
  CODE F1 of 0.235 on dev.
- `pydoc_code_share` (regression): the fraction of a paragraph's words that are CODE (same
  definition, over the whole paragraph; text is the de-quoted words). Bimodal: code blocks are
  1.0. Chance: predicting the train mean (0.279), Pearson 0, dev RMSE 0.355.

Three more are built from the same paragraph split, within each side, so no paragraph of dev
is seen in train (their rows are not `{"text", "label"}`; see each function for the details):
- `pydoc_pair` (sequence_classification with `text_pair`; different/same): do two passages
  come from the same help topic? A passage is consecutive paragraphs of one topic joined to at
  least 40 words; each passage is the `text` of one "same" and one "different" row, so the
  labels are exactly balanced. 1,318 train / 184 dev rows. Chance 0.5; word-set Jaccard above
  the train median scores 0.745 on dev.
- `pydoc_choice` (multiple_choice: context, question, 4 choices, label index): which of four
  section headings ("The "assert" statement", "String Methods", ...) a paragraph is from; the
  other three are drawn from the remaining headings, the right one's position is uniform.
  1,558 / 275 rows. Chance 0.25; matching the words of each heading's train paragraphs scores
  0.82 on dev.
- `pydoc_qa` (question_answering, SQuAD columns): "What goes in the blank? <a sentence with
  one quoted code span replaced by ___>", answered by that span (quotes excluded) in a context
  of its paragraph between the split's previous and next paragraphs of the same topic. Up to
  two questions a paragraph, from different sentences: 908 / 156 rows. Finding the blank's
  neighbouring words in the context gives 0.98 exact match: the task checks that the QA
  pipeline learns to point, not reading. Chance (a random quoted span of the context): 0.33.
  `pydoc_qa_v2` is the same with 12.5% of the questions moved to a context from another topic
  and no answer (SQuAD 2.0 style).

The generated tasks
-------------------
Sentences of words from a small built-in vocabulary, lengths lognormal (median 12 words,
long tail, capped at 120), deterministic for `seed` and `size` (default 300: 240 train / 60 dev).
Each sentence has a theme (animals, food or vehicles): most content words come from it, the rest
from the other themes, between filler words.
- `synthetic_cls` (sequence_classification): the sentence's theme. Chance 1/3.
- `synthetic_tag` (token_classification, tags ANIMAL/FOOD/VEHICLE/O): each word's theme
  (O for fillers, about half the words).
- `synthetic_reg` (regression): the fraction of words that are animals (mean 0.14).
- `synthetic_pair` (sequence_classification with `text_pair`): do two sentences share their
  theme (same/different, about balanced)? Chance 0.5.
- `synthetic_choice` (multiple_choice): which of four words (one of the sentence's theme, three
  of the others) belongs with the sentence. Chance 0.25.
- `synthetic_qa` (question_answering): "Which animal/food/vehicle is named first?", asked of a
  theme the sentence has; the answer is that word. Sentences without a theme word are skipped.
- `synthetic_gen` (generation): prompt "<the sentence> . about :", completion its theme written
  out (animals, food, vehicles). Chance: 1/3 exact match for a model that writes one theme.

The code
--------
`pydoc_text` reads the topics into paragraphs and builds the single-text pydoc rows,
`pydoc_tasks` the pair, choice and QA rows within each side of the split, `synthetic` the
generated tasks; this module holds the task table and the split.
"""

from __future__ import annotations

import numpy as np

from mtl.data.bundled.pydoc_tasks import (
    CHOICE_QUESTION,
    PAIR_MIN_WORDS,
    QA_UNANSWERABLE,
    pydoc_split_rows,
)
from mtl.data.bundled.pydoc_text import (
    TOPIC_CLASS_NAMES,
    TOPIC_CLASSES,
    Row,
    code_words,
    pydoc_paragraphs,
    pydoc_records,
    pydoc_rows,
)
from mtl.data.bundled.synthetic import THEME_NAMES, THEMES, synthetic_multi_rows, synthetic_rows
from mtl.errors import MtlError

__all__ = [
    "BUNDLED_TASKS",
    "CHOICE_QUESTION",
    "PAIR_LABELS",
    "PAIR_MIN_WORDS",
    "QA_UNANSWERABLE",
    "TOPIC_CLASSES",
    "TOPIC_CLASS_NAMES",
    "Row",
    "bundled_rows",
    "code_words",
    "pydoc_paragraphs",
]

PAIR_LABELS = ["different", "same"]

BUNDLED_TASKS: dict[str, tuple[str, list[str] | None]] = {
    "pydoc_topic": ("sequence_classification", TOPIC_CLASS_NAMES),
    "pydoc_code": ("token_classification", ["CODE", "O"]),
    "pydoc_code_share": ("regression", None),
    "pydoc_pair": ("sequence_classification", PAIR_LABELS),
    "pydoc_choice": ("multiple_choice", None),
    "pydoc_qa": ("question_answering", None),
    "pydoc_qa_v2": ("question_answering", None),
    "pydoc_heading": ("generation", None),
    "synthetic_cls": ("sequence_classification", sorted(THEME_NAMES.values())),
    "synthetic_tag": ("token_classification", [*sorted(THEMES), "O"]),
    "synthetic_reg": ("regression", None),
    "synthetic_pair": ("sequence_classification", PAIR_LABELS),
    "synthetic_choice": ("multiple_choice", None),
    "synthetic_qa": ("question_answering", None),
    "synthetic_gen": ("generation", None),
}
_SPLIT_WITHIN = {"pydoc_pair", "pydoc_choice", "pydoc_heading", "pydoc_qa", "pydoc_qa_v2"}


def _split(n: int, seed: int, dev_fraction: float) -> tuple[list[int], list[int]]:
    """(train, dev) indices of n rows, each sorted: a seeded permutation cut at dev_fraction."""
    order = np.random.default_rng(seed).permutation(n)
    n_dev = min(max(1, round(dev_fraction * n)), n - 1)
    return sorted(order[n_dev:].tolist()), sorted(order[:n_dev].tolist())


def bundled_rows(
    name: str, *, seed: int = 0, dev_fraction: float | None = None, size: int = 300
) -> tuple[str, list[str] | None, list[Row], list[Row]]:
    """(task_type, label_names, train_rows, dev_rows) of a bundled task.

    dev_fraction defaults to 0.15 for the pydoc tasks and 0.2 for the generated ones; `size` is
    the number of generated sentences (ignored by the pydoc tasks). The split is a seeded
    permutation of the paragraphs (of the rows for the generated tasks), so all pydoc tasks share
    it for the same seed; the pair, choice and QA rows are then built within each split.
    """
    if name not in BUNDLED_TASKS:
        raise MtlError(f"unknown bundled task {name!r}: choose one of {sorted(BUNDLED_TASKS)}")
    task_type, label_names = BUNDLED_TASKS[name]
    if name.startswith("pydoc"):
        dev_fraction = 0.15 if dev_fraction is None else dev_fraction
        train_index, dev_index = _split(len(pydoc_records()), seed, dev_fraction)
        if name in _SPLIT_WITHIN:
            train, dev = pydoc_split_rows(name, train_index, dev_index, seed)
            return task_type, label_names, train, dev
        rows = pydoc_rows(name)
    else:
        if size < 2:
            raise MtlError(f"bundled task {name!r}: size must be at least 2, got {size}")
        if name in ("synthetic_cls", "synthetic_tag", "synthetic_reg", "synthetic_gen"):
            rows = synthetic_rows(name, size, seed)
        else:
            rows = synthetic_multi_rows(name, size, seed)
        dev_fraction = 0.2 if dev_fraction is None else dev_fraction
        train_index, dev_index = _split(len(rows), seed, dev_fraction)
    return task_type, label_names, [rows[i] for i in train_index], [rows[i] for i in dev_index]
