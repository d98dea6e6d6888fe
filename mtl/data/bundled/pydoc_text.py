"""CPython's `pydoc_data.topics` as paragraphs, and the three single-text pydoc tasks.

`pydoc_records` splits each help topic on blank lines and drops headings (a line underlined
with `***`, `===`, ... and the underline) and ASCII tables. A paragraph is a code block if it
starts a doctest or a grammar rule, or is indented deeper than the latest prose paragraph and
does not read as prose; a one-line prose paragraph above a deeper-indented prose one is a
signature ("str.count(sub[, start[, end]])"), also code, unless it ends like a sentence. A
paragraph found in several topics is kept once, under the topic with the fewest paragraphs.
The tasks (`pydoc_topic`, `pydoc_code`, `pydoc_code_share`) are described in
`mtl.data.bundled`.
"""

from __future__ import annotations

import re
import textwrap
import warnings
from collections.abc import Iterator
from functools import lru_cache
from itertools import pairwise

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
QUOTED = re.compile(r"(?<![^\s(\[{])\"(\S(?:.*?\S)?)\"(?=[\s.,;:)\]}!?]|$)", re.DOTALL)


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
def pydoc_records() -> tuple[tuple[str, str, bool], ...]:
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
    return [(topic, text) for topic, text, _ in pydoc_records()]


def code_words(text: str, is_code_block: bool) -> tuple[list[str], list[str]]:
    """Words of a paragraph with the quote marks removed, and their tags (CODE or O)."""
    if is_code_block:
        words = text.split()
        return words, ["CODE"] * len(words)
    chars, is_code = [], []
    position = 0
    for match in QUOTED.finditer(text):
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


def pydoc_rows(name: str) -> list[Row]:
    """All rows of pydoc_topic, pydoc_code or pydoc_code_share, one per paragraph, unsplit."""
    rows = []
    for topic, text, is_code_block in pydoc_records():
        words, tags = code_words(text, is_code_block)
        if name == "pydoc_topic":
            rows.append({"text": text, "label": TOPIC_CLASSES[topic]})
        elif name == "pydoc_code":
            rows.append({"text": words, "label": tags})
        else:
            rows.append({"text": " ".join(words), "label": tags.count("CODE") / len(tags)})
    return rows
