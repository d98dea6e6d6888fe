"""The pydoc tasks built within each side of the paragraph split: pair, choice and QA.

Each builder gets the paragraphs of one side only (train or dev, from `pydoc_records`), so no
paragraph of dev is seen in train, and its own generator seeded with `[seed, side]`. The rows
are not `{"text", "label"}`; the package docstring (`mtl.data.bundled`) describes each task.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from mtl.data.bundled.pydoc_text import QUOTED, Row, pydoc_records

CHOICE_QUESTION = "Which section of the Python reference is this paragraph from?"
HEADING_CUE = "\nSection:"  # ends a pydoc_heading prompt: the heading is written after it
QA_UNANSWERABLE = 0.125
PAIR_MIN_WORDS = 40


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
    for match in QUOTED.finditer(text):
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
    """Give `share` of the rows the context of a row from another topic that contains neither
    side of the blanked sentence (sides with no word, such as the final ".", are not matched),
    and no answer. A row with no such context (rare) stays answerable."""
    contexts = list(dict.fromkeys((row["topic"], row["context"]) for row in rows))
    for i in sorted(rng.choice(len(rows), round(share * len(rows)), replace=False)):
        row = rows[i]
        parts = [part.strip() for part in row["question"].split("? ", 1)[1].split("___")]
        parts = [part for part in parts if re.search(r"\w", part)]
        candidates = [
            context
            for topic, context in contexts
            if topic != row["topic"] and not any(part in context for part in parts)
        ]
        if not candidates:
            continue
        row["context"] = candidates[rng.integers(len(candidates))]
        row["answers"] = {"text": [], "answer_start": []}
        row["id"] += "-x"


def pydoc_split_rows(
    name: str, train_index: list[int], dev_index: list[int], seed: int
) -> tuple[list[Row], list[Row]]:
    """Rows of pydoc_pair, pydoc_choice, pydoc_heading and pydoc_qa(_v2), built within each side
    of the split."""
    records = pydoc_records()
    titles = sorted({_pydoc_title(topic) for topic, _, _ in records})
    splits = []
    for part, index in enumerate((train_index, dev_index)):
        rng = np.random.default_rng([seed, part])
        if name == "pydoc_pair":
            splits.append(_pair_rows([records[i][:2] for i in index], rng))
        elif name == "pydoc_choice":
            splits.append(_choice_rows([records[i][:2] for i in index], titles, rng))
        elif name == "pydoc_heading":
            splits.append(
                [
                    {"prompt": text + HEADING_CUE, "completion": _pydoc_title(topic)}
                    for topic, text, _ in (records[i] for i in index)
                ]
            )
        else:
            share = QA_UNANSWERABLE if name == "pydoc_qa_v2" else 0.0
            splits.append(_qa_rows([(i, *records[i]) for i in index], rng, share))
    return splits[0], splits[1]
