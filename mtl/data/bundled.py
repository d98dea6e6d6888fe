"""Bundled tasks: real ones from CPython's own reference text, and small generated ones for tests.

Nothing here downloads. Each bundled task is `{"bundled": name, ...options}` in `build_task`;
`bundled_rows(name, seed=..., **options)` returns `(task_type, label_names, train, dev)` with rows
in the columns of the task type (`{"text": ..., "label": ...}` for the single-text ones) and a
split that depends only on the seed and the options.

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
"""

from __future__ import annotations

import re
import textwrap
import warnings
from collections.abc import Iterator
from functools import lru_cache
from itertools import pairwise

import numpy as np

from mtl.errors import MtlError

Row = dict[str, object]

TOPIC_CLASSES: dict[str, str] = {
    **dict.fromkeys(
        "assert assignment augassign break continue del global nonlocal pass raise return "
        "yield".split(),
        "simple_statements",
    ),
    **dict.fromkeys(
        "async class compound else for function if try while with".split(),
        "compound_statements",
    ),
    **dict.fromkeys(
        "atom-identifiers atom-literals attribute-references await binary bitwise booleans "
        "calls comparisons conversions dict exprlists in lambda lists operator-summary power "
        "shifting slicings subscriptions unary".split(),
        "expressions",
    ),
    **dict.fromkeys(
        "attribute-access callable-types context-managers customization numeric-types objects "
        "sequence-types specialnames types".split(),
        "data_model",
    ),
    **dict.fromkeys(
        "bltin-code-objects bltin-ellipsis-object bltin-null-object bltin-type-objects "
        "specialattrs truth typesfunctions typesmapping typesmethods typesmodules typesseq "
        "typesseq-mutable".split(),
        "builtin_types",
    ),
    **dict.fromkeys("formatstrings string-methods strings".split(), "strings_formatting"),
    **dict.fromkeys(
        "floating id-classes identifiers imaginary integers numbers".split(), "lexical"
    ),
    **dict.fromkeys(
        "dynamic-features exceptions execmodel import naming".split(), "execution_model"
    ),
    "debugger": "debugger",
}
TOPIC_CLASS_NAMES = sorted(set(TOPIC_CLASSES.values()))

_UNDERLINE = re.compile(r"^\s*([*=\-~^])\1{2,}\s*$")
_TABLE_LINE = re.compile(r"^\s*(\+[-=]|\|)")
_PLAIN_WORD = re.compile(r"^[(\[\"*]*[A-Za-z][A-Za-z'\-]*[)\]\"*]*[.,;:!?)]*$")
_PROSE_START = re.compile(r"\s*(\* |- |\d+\. |\*\*|Note:|See also:|[A-Z][a-z]+ [a-z])")
# A quoted span: an opening quote after a space or bracket, a closing one before a space or
# punctuation; the content may itself hold quotes (""ss"" is the literal "ss").
_QUOTED = re.compile(r"(?<![^\s(\[{])\"(\S(?:.*?\S)?)\"(?=[\s.,;:)\]}!?]|$)", re.DOTALL)


def _paragraphs(text: str) -> Iterator[list[str]]:
    lines: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.strip():
            lines.append(line)
        elif lines:
            yield lines
            lines = []


def _indent(lines: list[str]) -> int:
    return min(len(line) - len(line.lstrip()) for line in lines)


def _reads_as_prose(lines: list[str]) -> bool:
    words = " ".join(lines).split()
    plain = sum(bool(_PLAIN_WORD.match(word)) for word in words) / len(words)
    ends_sentence = lines[-1].rstrip()[-1] in ".:?"
    return bool(
        _PROSE_START.match(lines[0])
        or (ends_sentence and plain >= 0.5)
        or (plain >= 0.85 and len(words) >= 8)
    )


def _topic_blocks(text: str) -> list[tuple[str, bool]]:
    """(dedented paragraph, is_code) for one topic, without headings and tables."""
    blocks = []  # (lines, indent, is_code)
    text_indent = 0  # indentation of the latest prose paragraph
    for lines in _paragraphs(text):
        heading = {i for i, line in enumerate(lines) if _UNDERLINE.match(line)}
        lines = [line for i, line in enumerate(lines) if i not in heading and i + 1 not in heading]
        if not lines or any(_TABLE_LINE.match(line) for line in lines):
            continue
        indent = _indent(lines)
        first = lines[0].lstrip()
        is_code = (
            first.startswith(">>>")
            or "::=" in first
            or (indent > text_indent and not _reads_as_prose(lines))
        )
        if not is_code:
            text_indent = indent
        blocks.append((lines, indent, is_code))
    # A one-line paragraph introducing an indented description is a signature: "str.count(sub)".
    for i, ((lines, indent, is_code), (_, next_indent, next_is_code)) in enumerate(
        pairwise(blocks)
    ):
        if len(lines) == 1 and not is_code and not next_is_code and next_indent > indent:
            blocks[i] = (lines, indent, lines[0].rstrip()[-1] not in ".:?")
    return [(textwrap.dedent("\n".join(lines)), is_code) for lines, _, is_code in blocks]


@lru_cache(maxsize=1)
def _pydoc_records() -> tuple[tuple[str, str, bool], ...]:
    """(topic, paragraph, is_code_block), deduplicated, in topic order then text order."""
    from pydoc_data.topics import topics

    unmapped = sorted(set(topics) - set(TOPIC_CLASSES))
    if unmapped:
        warnings.warn(f"pydoc topics without a class are skipped: {unmapped}", stacklevel=2)
    per_topic = {name: list(_topic_blocks(topics[name])) for name in sorted(TOPIC_CLASSES)}
    owner: dict[str, str] = {}  # normalized text -> most specific topic holding it
    for name in sorted(per_topic, key=lambda n: (len(per_topic[n]), n)):
        for text, _ in per_topic[name]:
            owner.setdefault(" ".join(text.split()), name)
    records, seen = [], set()
    for name, blocks in per_topic.items():
        for text, is_code in blocks:
            key = " ".join(text.split())
            if owner[key] == name and key not in seen:
                seen.add(key)
                records.append((name, text, is_code))
    return tuple(records)


def pydoc_paragraphs() -> list[tuple[str, str]]:
    """(topic, paragraph) pairs of the pydoc tasks, deterministic (topic order, then text order)."""
    return [(topic, text) for topic, text, _ in _pydoc_records()]


def code_words(text: str, is_code_block: bool) -> tuple[list[str], list[str]]:
    """Words of a paragraph with the quote marks removed, and their tags (CODE or O)."""
    if is_code_block:
        words = text.split()
        return words, ["CODE"] * len(words)
    chars, is_code = [], []
    position = 0
    for match in _QUOTED.finditer(text):
        chars += text[position : match.start()]
        is_code += [False] * (match.start() - position)
        chars += match.group(1)
        is_code += [True] * len(match.group(1))
        position = match.end()
    chars += text[position:]
    is_code += [False] * (len(text) - position)
    words, tags, in_word = [], [], False
    for char, code in zip(chars, is_code, strict=True):
        if char.isspace():
            in_word = False
        elif not in_word:
            words.append(char)
            tags.append("CODE" if code else "O")
            in_word = True
        else:
            words[-1] += char
            if code:
                tags[-1] = "CODE"
    return words, tags


def _pydoc_rows(name: str) -> list[Row]:
    rows = []
    for topic, text, is_code_block in _pydoc_records():
        words, tags = code_words(text, is_code_block)
        if name == "pydoc_topic":
            rows.append({"text": text, "label": TOPIC_CLASSES[topic]})
        elif name == "pydoc_code":
            rows.append({"text": words, "label": tags})
        else:
            rows.append({"text": " ".join(words), "label": tags.count("CODE") / len(tags)})
    return rows


_THEMES = {
    "ANIMAL": "cat dog horse cow sheep goat mouse tiger lion bear wolf fox owl eagle duck "
    "frog snake whale shark rabbit".split(),
    "FOOD": "bread cheese apple pear rice soup salad pizza pasta butter honey carrot onion "
    "lemon cake cookie bean egg milk tea".split(),
    "VEHICLE": "car bus train truck bike boat ship plane tram taxi van tractor scooter "
    "rocket canoe ferry wagon jeep sled yacht".split(),
}
_FILLER = (
    "the a one this that big small red old new fast slow near far and or with from to of in on "
    "at by saw found liked took had was is seems looks very quite really"
).split()
_SYNTHETIC_THEME_NAMES = {"ANIMAL": "animals", "FOOD": "food", "VEHICLE": "vehicles"}


def _synthetic_sentences(size: int, seed: int) -> list[tuple[str, list[str], list[str]]]:
    """(theme, words, per-word tags) for `size` sentences."""
    rng = np.random.default_rng(seed)
    themes = sorted(_THEMES)
    sentences = []
    for _ in range(size):
        theme = themes[rng.integers(len(themes))]
        n_words = int(np.clip(rng.lognormal(np.log(12), 0.6), 3, 120))
        words, tags = [], []
        for _ in range(n_words):
            if rng.random() < 0.55:
                words.append(str(rng.choice(_FILLER)))
                tags.append("O")
            else:
                tag = theme if rng.random() < 0.8 else themes[rng.integers(len(themes))]
                words.append(str(rng.choice(_THEMES[tag])))
                tags.append(tag)
        sentences.append((theme, words, tags))
    return sentences


def _synthetic_rows(name: str, size: int, seed: int) -> list[Row]:
    rows = []
    for theme, words, tags in _synthetic_sentences(size, seed):
        if name == "synthetic_cls":
            rows.append({"text": " ".join(words), "label": _SYNTHETIC_THEME_NAMES[theme]})
        elif name == "synthetic_tag":
            rows.append({"text": words, "label": tags})
        else:
            rows.append({"text": " ".join(words), "label": tags.count("ANIMAL") / len(tags)})
    return rows


@lru_cache(maxsize=128)
def _pydoc_title(topic: str) -> str:
    """The heading of a help topic: "The "assert" statement", "String Methods", ..."""
    from pydoc_data.topics import topics

    return topics[topic].splitlines()[0].strip()


def _flat(text: str) -> str:
    return " ".join(text.split())


def _passages(paragraphs: list[tuple[str, str]], min_words: int) -> list[tuple[str, str]]:
    """Consecutive paragraphs of one topic joined until a passage has `min_words` words."""
    passages: list[tuple[str, str]] = []
    for topic, text in paragraphs:
        if passages and passages[-1][0] == topic and len(passages[-1][1].split()) < min_words:
            passages[-1] = (topic, passages[-1][1] + "\n\n" + text)
        else:
            passages.append((topic, text))
    return passages


def _pair_rows(paragraphs: list[tuple[str, str]], rng: np.random.Generator) -> list[Row]:
    """Two rows per passage that shares its topic with another: one "same", one "different"."""
    passages = _passages(paragraphs, PAIR_MIN_WORDS)
    by_topic: dict[str, list[int]] = {}
    for i, (topic, _) in enumerate(passages):
        by_topic.setdefault(topic, []).append(i)
    rows = []
    for i, (topic, text) in enumerate(passages):
        same = [passages[j][1] for j in by_topic[topic] if j != i]
        if not same:
            continue
        different = [other for t, other in passages if t != topic]
        rows.append({"text": text, "text_pair": same[rng.integers(len(same))], "label": "same"})
        partner = different[rng.integers(len(different))]
        rows.append({"text": text, "text_pair": partner, "label": "different"})
    return rows


def _choice_rows(
    paragraphs: list[tuple[str, str]], titles: list[str], rng: np.random.Generator
) -> list[Row]:
    """Each paragraph with its topic's heading and three other headings, in random order."""
    rows = []
    for topic, text in paragraphs:
        right = _pydoc_title(topic)
        others = [title for title in titles if title != right]
        choices = [others[j] for j in rng.choice(len(others), 3, replace=False)]
        label = int(rng.integers(4))
        choices.insert(label, right)
        rows.append(
            {"context": text, "question": CHOICE_QUESTION, "choices": choices, "label": label}
        )
    return rows


_SENTENCE_END = re.compile(r"[.!?]\s+(?=[A-Z\"*(])")
_BULLET = re.compile(r"^(\* |- |\d+\. )")


def _cloze_spans(text: str) -> list[tuple[int, int, re.Match[str]]]:
    """(sentence start, sentence end, quoted span) for each blankable code span of flat text."""
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    sentences = list(zip([0, *ends], [*ends, len(text)], strict=True))
    spans = []
    for match in _QUOTED.finditer(text):
        code = match.group(1)
        if len(code) > 40 or '"' in code:
            continue
        for start, end in sentences:
            if (
                start <= match.start()
                and match.end() <= end
                and 6 <= len(text[start:end].split()) <= 50
            ):
                spans.append((start, end, match))
    return spans


def _qa_rows(
    records: list[tuple[int, str, str, bool]],
    rng: np.random.Generator,
    unanswerable: float = 0.0,
) -> list[Row]:
    """Fill-the-blank questions on quoted code, answered in the paragraph and its neighbours.

    `records` are (index, topic, text, is_code_block) of one split, in reference order. Up to two
    questions per prose paragraph, from different sentences; the context is the paragraph between
    the split's previous and next paragraphs of the same topic. With `unanswerable` > 0, that
    share of the questions is moved to the context of a paragraph from another topic.
    """
    texts = [text if is_code else _flat(text) for _, _, text, is_code in records]
    rows = []
    for k, (index, topic, _, is_code) in enumerate(records):
        spans = [] if is_code else _cloze_spans(texts[k])
        if not spans:
            continue
        window = [j for j in (k - 1, k, k + 1) if 0 <= j < len(records) and records[j][1] == topic]
        context = "\n\n".join(texts[j] for j in window)
        offset = sum(len(texts[j]) + 2 for j in window if j < k)  # after the previous one
        used_sentences = set()
        for n in rng.permutation(len(spans)):
            start, end, match = spans[n]
            if start in used_sentences or len(used_sentences) == 2:
                continue
            used_sentences.add(start)
            text = texts[k]
            sentence = text[start : match.start()] + "___" + text[match.end() : end]
            sentence = _BULLET.sub("", sentence.strip())
            rows.append(
                {
                    "id": f"pydoc-{index}-{start}",
                    "question": f"What goes in the blank? {sentence}",
                    "context": context,
                    "answers": {
                        "text": [match.group(1)],
                        "answer_start": [offset + match.start(1)],
                    },
                    "topic": topic,
                }
            )
    if unanswerable:
        _move_questions(rows, unanswerable, rng)
    for row in rows:
        del row["topic"]
    return rows


def _move_questions(rows: list[Row], share: float, rng: np.random.Generator) -> None:
    """Give `share` of the rows the context of a row from another topic, and no answer."""
    contexts = list(dict.fromkeys((row["topic"], row["context"]) for row in rows))
    for i in sorted(rng.choice(len(rows), round(share * len(rows)), replace=False)):
        row = rows[i]
        parts = [part.strip() for part in row["question"].split("? ", 1)[1].split("___")]
        candidates = [
            context
            for topic, context in contexts
            if topic != row["topic"] and not any(part and part in context for part in parts)
        ]
        row["context"] = candidates[rng.integers(len(candidates))]
        row["answers"] = {"text": [], "answer_start": []}
        row["id"] += "-x"


def _pydoc_split_rows(
    name: str, train_index: list[int], dev_index: list[int], seed: int
) -> tuple[list[Row], list[Row]]:
    """Rows of pydoc_pair, pydoc_choice and pydoc_qa(_v2), built within each side of the split."""
    records = _pydoc_records()
    titles = sorted({_pydoc_title(topic) for topic, _, _ in records})
    splits = []
    for part, index in enumerate((train_index, dev_index)):
        rng = np.random.default_rng([seed, part])
        if name == "pydoc_pair":
            splits.append(_pair_rows([records[i][:2] for i in index], rng))
        elif name == "pydoc_choice":
            splits.append(_choice_rows([records[i][:2] for i in index], titles, rng))
        else:
            share = QA_UNANSWERABLE if name == "pydoc_qa_v2" else 0.0
            splits.append(_qa_rows([(i, *records[i]) for i in index], rng, share))
    return splits[0], splits[1]


_SYNTHETIC_SINGULAR = {"ANIMAL": "animal", "FOOD": "food", "VEHICLE": "vehicle"}


def _synthetic_multi_rows(name: str, size: int, seed: int) -> list[Row]:
    """Rows of synthetic_pair, synthetic_choice and synthetic_qa (see the module docstring)."""
    sentences = _synthetic_sentences(size, seed)
    rng = np.random.default_rng([seed, 1])
    themes = sorted(_THEMES)
    by_theme = {theme: [i for i, s in enumerate(sentences) if s[0] == theme] for theme in themes}
    rows: list[Row] = []
    for i, (theme, words, tags) in enumerate(sentences):
        text = " ".join(words)
        if name == "synthetic_pair":
            same = i % 2 == 0 and len(by_theme[theme]) > 1
            partners = (
                [j for j in by_theme[theme] if j != i]
                if same
                else [j for j, s in enumerate(sentences) if s[0] != theme]
            )
            if not partners:
                continue
            partner = " ".join(sentences[partners[rng.integers(len(partners))]][1])
            rows.append(
                {"text": text, "text_pair": partner, "label": "same" if same else "different"}
            )
        elif name == "synthetic_choice":
            other = [word for t in themes if t != theme for word in _THEMES[t]]
            choices = [str(word) for word in rng.choice(other, 3, replace=False)]
            label = int(rng.integers(4))
            choices.insert(label, str(rng.choice(_THEMES[theme])))
            question = "Which word belongs with this sentence?"
            rows.append({"context": text, "question": question, "choices": choices, "label": label})
        else:
            present = [t for t in themes if t in tags]
            if not present:
                continue
            asked = present[rng.integers(len(present))]
            position = tags.index(asked)
            start = sum(len(word) + 1 for word in words[:position])
            rows.append(
                {
                    "id": f"synthetic-{i}",
                    "question": f"Which {_SYNTHETIC_SINGULAR[asked]} is named first?",
                    "context": text,
                    "answers": {"text": [words[position]], "answer_start": [start]},
                }
            )
    return rows


CHOICE_QUESTION = "Which section of the Python reference is this paragraph from?"
QA_UNANSWERABLE = 0.125
PAIR_LABELS = ["different", "same"]
PAIR_MIN_WORDS = 40

BUNDLED_TASKS: dict[str, tuple[str, list[str] | None]] = {
    "pydoc_topic": ("sequence_classification", TOPIC_CLASS_NAMES),
    "pydoc_code": ("token_classification", ["CODE", "O"]),
    "pydoc_code_share": ("regression", None),
    "pydoc_pair": ("sequence_classification", PAIR_LABELS),
    "pydoc_choice": ("multiple_choice", None),
    "pydoc_qa": ("question_answering", None),
    "pydoc_qa_v2": ("question_answering", None),
    "synthetic_cls": ("sequence_classification", sorted(_SYNTHETIC_THEME_NAMES.values())),
    "synthetic_tag": ("token_classification", [*sorted(_THEMES), "O"]),
    "synthetic_reg": ("regression", None),
    "synthetic_pair": ("sequence_classification", PAIR_LABELS),
    "synthetic_choice": ("multiple_choice", None),
    "synthetic_qa": ("question_answering", None),
}
_SPLIT_WITHIN = {"pydoc_pair", "pydoc_choice", "pydoc_qa", "pydoc_qa_v2"}


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
        train_index, dev_index = _split(len(_pydoc_records()), seed, dev_fraction)
        if name in _SPLIT_WITHIN:
            train, dev = _pydoc_split_rows(name, train_index, dev_index, seed)
            return task_type, label_names, train, dev
        rows = _pydoc_rows(name)
    else:
        if size < 2:
            raise MtlError(f"bundled task {name!r}: size must be at least 2, got {size}")
        if name in ("synthetic_cls", "synthetic_tag", "synthetic_reg"):
            rows = _synthetic_rows(name, size, seed)
        else:
            rows = _synthetic_multi_rows(name, size, seed)
        dev_fraction = 0.2 if dev_fraction is None else dev_fraction
        train_index, dev_index = _split(len(rows), seed, dev_fraction)
    return task_type, label_names, [rows[i] for i in train_index], [rows[i] for i in dev_index]
