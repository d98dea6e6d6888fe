"""The generated tasks: sentences of themed words from a small built-in vocabulary.

`synthetic_rows` builds the single-text tasks (cls, tag, reg), `synthetic_multi_rows` the pair,
choice and QA ones; both start from the same `size` sentences, deterministic for `seed`. The
package docstring (`mtl.data.bundled`) describes each task.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

Row = dict[str, object]

THEMES = {
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
THEME_NAMES = {"ANIMAL": "animals", "FOOD": "food", "VEHICLE": "vehicles"}


@lru_cache(maxsize=4)
def _synthetic_sentences(size: int, seed: int) -> tuple[tuple[str, tuple, tuple], ...]:
    """(theme, words, per-word tags) for `size` sentences. Kept for the next call: the three
    single-text tasks (and each job of an in-process sweep) read the same sentences."""
    rng = np.random.default_rng(seed)
    themes = sorted(THEMES)
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
                words.append(str(rng.choice(THEMES[tag])))
                tags.append(tag)
        sentences.append((theme, tuple(words), tuple(tags)))
    return tuple(sentences)


def synthetic_rows(name: str, size: int, seed: int) -> list[Row]:
    """All rows of synthetic_cls, synthetic_tag, synthetic_reg or synthetic_gen, one per
    sentence, unsplit."""
    rows: list[Row] = []
    for theme, words, tags in _synthetic_sentences(size, seed):
        if name == "synthetic_gen":  # the sentence -> what it is about, written out
            rows.append(
                {"prompt": " ".join(words) + " . about :", "completion": THEME_NAMES[theme]}
            )
        elif name == "synthetic_cls":
            rows.append({"text": " ".join(words), "label": THEME_NAMES[theme]})
        elif name == "synthetic_tag":
            rows.append({"text": list(words), "label": list(tags)})
        else:
            rows.append({"text": " ".join(words), "label": tags.count("ANIMAL") / len(tags)})
    return rows


_SINGULAR = {"ANIMAL": "animal", "FOOD": "food", "VEHICLE": "vehicle"}


def synthetic_multi_rows(name: str, size: int, seed: int) -> list[Row]:
    """Rows of synthetic_pair, synthetic_choice and synthetic_qa (see the package docstring)."""
    sentences = _synthetic_sentences(size, seed)
    rng = np.random.default_rng([seed, 1])
    themes = sorted(THEMES)
    by_theme = {theme: [i for i, s in enumerate(sentences) if s[0] == theme] for theme in themes}
    other_themes = {
        theme: sorted(set(range(len(sentences))) - set(by_theme[theme])) for theme in themes
    }
    rows: list[Row] = []
    for i, (theme, words, tags) in enumerate(sentences):
        text = " ".join(words)
        if name == "synthetic_pair":
            same = i % 2 == 0 and len(by_theme[theme]) > 1
            partners = [j for j in by_theme[theme] if j != i] if same else other_themes[theme]
            if not partners:
                continue
            partner = " ".join(sentences[partners[rng.integers(len(partners))]][1])
            rows.append(
                {"text": text, "text_pair": partner, "label": "same" if same else "different"}
            )
        elif name == "synthetic_choice":
            other = [word for t in themes if t != theme for word in THEMES[t]]
            choices = [str(word) for word in rng.choice(other, 3, replace=False)]
            label = int(rng.integers(4))
            choices.insert(label, str(rng.choice(THEMES[theme])))
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
                    "question": f"Which {_SINGULAR[asked]} is named first?",
                    "context": text,
                    "answers": {"text": [words[position]], "answer_start": [start]},
                }
            )
    return rows
