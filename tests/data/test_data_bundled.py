import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml
from datasets import disable_progress_bars

from mtl.config import TaskConfig
from mtl.data import (
    BUNDLED_TASKS,
    TOPIC_CLASSES,
    build_task_from_config,
    load_tokenizer,
    pydoc_paragraphs,
)
from mtl.data.bundled import bundled_rows, code_words
from mtl.data.bundled.pydoc_tasks import HEADING_CUE
from mtl.errors import MtlError

disable_progress_bars()


def build(name, seed=0, max_examples=None, **kwargs):
    task_type = BUNDLED_TASKS[name][0]
    source = {"bundled": name, **kwargs.pop("source", {})}
    config = TaskConfig(type=task_type, source=source, **kwargs)
    return build_task_from_config(
        name, config, load_tokenizer(), seed=seed, max_examples=max_examples
    )


PAIR_TASKS = ("pydoc_pair", "synthetic_pair")
CHOICE_TASKS = ("pydoc_choice", "synthetic_choice")
QA_TASKS = ("pydoc_qa", "pydoc_qa_v2", "synthetic_qa")
GENERATION_TASKS = ["pydoc_heading", "synthetic_gen"]  # tests/task_types/test_generation.py
SINGLE_TEXT_TASKS = sorted(
    set(BUNDLED_TASKS) - {*PAIR_TASKS, *CHOICE_TASKS, *QA_TASKS, *GENERATION_TASKS}
)
TASK_CONF = Path(__file__).parents[2] / "conf" / "task"


@pytest.mark.parametrize("name", SINGLE_TEXT_TASKS)
def test_bundled_task_builds_with_consistent_columns(name):
    task = build(name, max_examples=200)
    assert task.type == BUNDLED_TASKS[name][0]
    for ds in (task.train, task.dev):
        assert len(ds) > 0
        assert {"input_ids", "labels", "length", "example_id"} <= set(ds.column_names)
        assert list(ds["example_id"]) == list(range(len(ds)))
        for ids, length, labels in zip(ds["input_ids"], ds["length"], ds["labels"], strict=True):
            assert length == len(ids) <= 256
            if task.type == "token_classification":
                assert len(labels) == length
                assert all(-100 <= y < task.num_labels for y in labels)
                assert labels[0] == labels[-1] == -100  # [CLS] and [SEP]
            elif task.type == "sequence_classification":
                assert 0 <= labels < task.num_labels
            else:
                assert 0.0 <= labels <= 1.0
    assert task.num_labels == (1 if task.type == "regression" else len(task.label_names))


@pytest.mark.parametrize("name", ["pydoc_topic", "synthetic_tag"])
def test_bundled_split_is_deterministic_and_disjoint(name):
    _, _, train, dev = bundled_rows(name, seed=3)
    _, _, train2, dev2 = bundled_rows(name, seed=3)
    _, _, train3, _ = bundled_rows(name, seed=4)
    assert (train, dev) == (train2, dev2)
    assert train != train3
    key = [str(row["text"]) for row in train]
    assert not set(key) & {str(row["text"]) for row in dev}
    assert 0.1 < len(dev) / (len(train) + len(dev)) < 0.25


def test_pydoc_tasks_share_one_split():
    topic_dev = [row["text"] for row in bundled_rows("pydoc_topic")[3]]
    code_dev = [row["text"] for row in bundled_rows("pydoc_code")[3]]
    # Removing quote marks keeps the words, so the same paragraph has the same word count.
    assert [len(text.split()) for text in topic_dev] == [len(words) for words in code_dev]


def test_pydoc_topic_mapping_covers_every_topic():
    from pydoc_data.topics import topics

    assert set(topics) == set(TOPIC_CLASSES)
    assert 6 <= len(set(TOPIC_CLASSES.values())) <= 10
    paragraphs = pydoc_paragraphs()
    assert 1500 < len(paragraphs) < 2700
    assert len({text for _, text in paragraphs}) == len(paragraphs)  # deduplicated
    _, label_names, train, dev = bundled_rows("pydoc_topic")
    assert {row["label"] for row in train} == set(label_names)
    assert {row["label"] for row in dev} == set(label_names)


def test_capped_split_is_a_seeded_sample_in_file_order(tmp_path):
    # pydoc_topic's train split is in document order (its first rows are one topic), so a cap
    # taking the first rows would leave one class and be refused.
    _, _, train, _ = bundled_rows("pydoc_topic")
    assert len({row["label"] for row in train[:30]}) == 1
    task = build("pydoc_topic", max_examples=30)
    assert len(task.train) == len(task.dev) == 30
    assert len(set(task.train["labels"])) >= 3
    again = build("pydoc_topic", max_examples=30)
    other = build("pydoc_topic", max_examples=30, seed=1)
    assert list(task.train["input_ids"]) == list(again.train["input_ids"])
    assert list(task.train["input_ids"]) != list(other.train["input_ids"])
    # the sampled rows keep the file's order
    rows = "".join(f"row {i},{'ab'[i % 2]}\n" for i in range(100))
    for split in ("train", "dev"):
        (tmp_path / f"{split}.csv").write_text("text,label\n" + rows)
    source = {split: str(tmp_path / f"{split}.csv") for split in ("train", "dev")}
    config = TaskConfig(type="sequence_classification", source=source)
    rows_task = build_task_from_config("rows", config, load_tokenizer(), max_examples=10)
    tokenizer = load_tokenizer()
    numbers = [
        int(tokenizer.decode(ids, skip_special_tokens=True).split()[1])
        for ids in rows_task.train["input_ids"]
    ]
    assert numbers == sorted(numbers) and numbers != list(range(len(numbers)))


def test_code_words_strip_quotes_and_tag_code():
    words, tags = code_words('The "assert" statement uses ""ss"" and "x in s".', False)
    assert words == ["The", "assert", "statement", "uses", '"ss"', "and", "x", "in", "s."]
    assert tags == ["O", "CODE", "O", "O", "CODE", "O", "CODE", "CODE", "CODE"]
    assert code_words('print("hi")', True) == (['print("hi")'], ["CODE"])


def test_pydoc_code_share_matches_tags():
    _, _, code_train, _ = bundled_rows("pydoc_code")
    _, _, share_train, _ = bundled_rows("pydoc_code_share")
    for tagged, share in zip(code_train[:100], share_train[:100], strict=True):
        assert share["text"] == " ".join(tagged["text"])
        assert share["label"] == pytest.approx(tagged["label"].count("CODE") / len(tagged["label"]))
    shares = np.array([row["label"] for row in share_train])
    assert 0.05 < shares.mean() < 0.6 and shares.std() > 0.1


def test_synthetic_size_option_and_seed():
    task = build("synthetic_cls", source={"size": 50}, seed=1)
    assert len(task.train) + len(task.dev) == 50
    again = build("synthetic_cls", source={"size": 50}, seed=1)
    assert list(task.train["input_ids"]) == list(again.train["input_ids"])


def test_unknown_bundled_name_and_wrong_type_raise():
    with pytest.raises(MtlError, match="unknown bundled task 'nope'"):
        config = TaskConfig(type="regression", source={"bundled": "nope"})
        build_task_from_config("t", config, load_tokenizer())
    with pytest.raises(MtlError, match="task 't'"):  # pydoc_code's tags are not numbers
        config = TaskConfig(type="regression", source={"bundled": "pydoc_code"})
        build_task_from_config("t", config, load_tokenizer())


# Pair, multiple-choice and QA tasks: their rows only (their task types encode them).

WORD = re.compile(r"[a-z_]+")


def words(text):
    return set(WORD.findall(text.lower()))


def check_row(name, row):
    task_type, label_names = BUNDLED_TASKS[name]
    if name in PAIR_TASKS:
        assert task_type == "sequence_classification" and label_names == ["different", "same"]
        assert set(row) == {"text", "text_pair", "label"} and row["label"] in label_names
        assert isinstance(row["text"], str) and isinstance(row["text_pair"], str)
        assert row["text"] and row["text_pair"] and row["text"] != row["text_pair"]
    elif name in CHOICE_TASKS:
        assert task_type == "multiple_choice" and label_names is None
        assert set(row) == {"context", "question", "choices", "label"}
        assert row["context"] and row["question"]
        assert len(row["choices"]) == len(set(row["choices"])) == 4
        assert all(isinstance(choice, str) and choice for choice in row["choices"])
        assert type(row["label"]) is int and 0 <= row["label"] < 4
    else:
        assert task_type == "question_answering" and label_names is None
        assert set(row) == {"id", "question", "context", "answers"}
        assert isinstance(row["id"], str) and row["question"] and row["context"]
        answers = row["answers"]
        assert set(answers) == {"text", "answer_start"}
        assert len(answers["text"]) == len(answers["answer_start"]) <= 1
        for text, start in zip(answers["text"], answers["answer_start"], strict=True):
            assert text and type(start) is int
            assert row["context"][start : start + len(text)] == text


@pytest.mark.parametrize("name", [*PAIR_TASKS, *CHOICE_TASKS, *QA_TASKS])
def test_new_task_rows_have_the_task_type_schema(name):
    _, _, train, dev = bundled_rows(name)
    for row in train + dev:
        check_row(name, row)
    if name in QA_TASKS:
        ids = [row["id"] for row in train + dev]
        assert len(ids) == len(set(ids))


@pytest.mark.parametrize("name", [*PAIR_TASKS, *CHOICE_TASKS, *QA_TASKS])
def test_new_tasks_are_deterministic_for_a_seed(name):
    assert bundled_rows(name, seed=5) == bundled_rows(name, seed=5)
    assert bundled_rows(name, seed=5)[3] != bundled_rows(name, seed=6)[3]


def paragraphs_of(name, rows):
    """The reference paragraphs a pydoc row is built from."""
    if name == "pydoc_pair":
        texts = [t for row in rows for t in (row["text"], row["text_pair"])]
    elif name == "pydoc_heading":
        texts = [row["prompt"].removesuffix(HEADING_CUE) for row in rows]
    else:
        texts = [row["context"] for row in rows]
    return {" ".join(p.split()) for text in texts for p in text.split("\n\n")}


@pytest.mark.parametrize(
    "name", ["pydoc_pair", "pydoc_choice", "pydoc_heading", "pydoc_qa", "pydoc_qa_v2"]
)
def test_new_pydoc_tasks_keep_the_paragraph_split(name):
    _, _, topic_train, topic_dev = bundled_rows("pydoc_topic", seed=2)
    _, _, train, dev = bundled_rows(name, seed=2)
    assert paragraphs_of(name, dev) <= {" ".join(row["text"].split()) for row in topic_dev}
    assert paragraphs_of(name, train) <= {" ".join(row["text"].split()) for row in topic_train}
    assert not paragraphs_of(name, train) & paragraphs_of(name, dev)


def test_pydoc_pair_sizes_and_balance():
    _, _, train, dev = bundled_rows("pydoc_pair")
    assert 1000 < len(train) < 2000 and 150 < len(dev) < 300
    for rows in (train, dev):
        counts = Counter(row["label"] for row in rows)
        assert counts["same"] == counts["different"]  # exactly balanced: chance 0.5
        # Each passage is the first text of one "same" and one "different" row.
        assert Counter(Counter(row["text"] for row in rows).values()) == {2: len(rows) // 2}


def test_pydoc_choice_sizes_and_labels():
    _, _, train, dev = bundled_rows("pydoc_choice")
    _, _, topic_train, topic_dev = bundled_rows("pydoc_topic")
    assert (len(train), len(dev)) == (len(topic_train), len(topic_dev))  # one row a paragraph
    labels = Counter(row["label"] for row in train)
    assert set(labels) == {0, 1, 2, 3} and max(labels.values()) < 0.3 * len(train)
    assert len({row["choices"][row["label"]] for row in train}) > 60  # most section headings


def test_pydoc_heading_writes_each_paragraphs_section_heading():
    _, _, train, dev = bundled_rows("pydoc_heading")
    _, _, choice_train, choice_dev = bundled_rows("pydoc_choice")
    for rows, choices in ((train, choice_train), (dev, choice_dev)):
        assert len(rows) == len(choices)  # one row a paragraph, the same paragraphs in order
        for row, choice in zip(rows, choices, strict=True):
            assert row["prompt"] == choice["context"] + HEADING_CUE
            assert row["completion"] == choice["choices"][choice["label"]]
    headings = Counter(row["completion"] for row in dev)
    assert len(headings) > 40 and max(headings.values()) < 0.15 * len(dev)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", ["pydoc_qa", "pydoc_qa_v2"])
def test_pydoc_qa_sizes_and_unanswerable_share(name, seed):
    _, _, train, dev = bundled_rows(name, seed=seed)
    assert 600 < len(train) < 2000 and 100 < len(dev) < 400
    for rows in (train, dev):
        share = np.mean([not row["answers"]["text"] for row in rows])
        assert share == (0 if name == "pydoc_qa" else pytest.approx(0.125, abs=0.01))
    for row in train + dev:
        assert row["question"].startswith("What goes in the blank? ")
        assert row["question"].count("___") == 1


@pytest.mark.parametrize("seed", [0, 1])
def test_pydoc_qa_v2_questions_without_answer_are_not_in_their_context(seed):
    _, _, train, _ = bundled_rows("pydoc_qa_v2", seed=seed)
    answerable = {row["id"]: row for row in bundled_rows("pydoc_qa", seed=seed)[2]}
    unanswerable = [row for row in train if not row["answers"]["text"]]
    for row in unanswerable:
        original = answerable[row["id"].removesuffix("-x")]
        assert row["question"] == original["question"]
        for part in row["question"].removeprefix("What goes in the blank? ").split("___"):
            assert part.strip() not in row["context"] or not re.search(r"\w", part)
        assert original["context"] != row["context"]
    assert len(unanswerable) > 0.1 * len(train)


def test_synthetic_new_tasks_follow_size():
    for name in (*PAIR_TASKS, *CHOICE_TASKS, *QA_TASKS):
        if name.startswith("synthetic"):
            _, _, train, dev = bundled_rows(name, size=50, seed=1)
            assert 45 <= len(train) + len(dev) <= 50 and len(dev) >= 9


# Learnability: simple lexical baselines clearly beat chance on dev, so an encoder can learn them.


def pair_baseline(train, dev):
    """Word-set Jaccard above the train median means "same"; dev accuracy."""

    def jaccard(row):
        a, b = words(row["text"]), words(row["text_pair"])
        return len(a & b) / max(1, len(a | b))

    threshold = np.median([jaccard(row) for row in train])
    return np.mean([(jaccard(row) > threshold) == (row["label"] == "same") for row in dev])


def choice_baseline(train, dev):
    """Pick the choice whose train contexts share the most (idf-weighted) words; dev accuracy."""
    profile = {}
    for row in train:
        profile.setdefault(row["choices"][row["label"]], Counter()).update(words(row["context"]))
    df = Counter(word for counts in profile.values() for word in counts)

    def score(context, choice):
        counts = profile.get(choice, Counter())
        total = sum(counts.values()) or 1
        return sum(counts[w] / total * np.log(len(profile) / df[w]) for w in context if counts[w])

    picks = [np.argmax([score(words(r["context"]), c) for c in r["choices"]]) for r in dev]
    return np.mean([pick == row["label"] for pick, row in zip(picks, dev, strict=True)])


def qa_baseline(dev):
    """Find the question's words around the blank in the context; the quoted span there."""
    hits = []
    for row in dev:
        left, right = row["question"].removeprefix("What goes in the blank? ").split("___")
        pattern = r"\s*\"(.+?)\"\s*".join(
            re.escape(" ".join(part)) for part in (left.split()[-3:], right.split()[:3])
        )
        match = re.search(pattern, row["context"])
        hits.append((match.group(1) if match else None) in (row["answers"]["text"] or [None]))
    return np.mean(hits)


def test_lexical_baselines_beat_chance():
    assert pair_baseline(*bundled_rows("pydoc_pair")[2:]) > 0.68  # chance 0.5
    assert pair_baseline(*bundled_rows("synthetic_pair", size=400)[2:]) > 0.62
    assert choice_baseline(*bundled_rows("pydoc_choice")[2:]) > 0.7  # chance 0.25
    assert choice_baseline(*bundled_rows("synthetic_choice", size=400)[2:]) > 0.6
    assert qa_baseline(bundled_rows("pydoc_qa")[3]) > 0.95
    # Chance for QA: a uniformly random quoted span of the context.
    dev = bundled_rows("pydoc_qa")[3]
    assert np.mean([1 / len(re.findall(r"\"[^\"\s]", row["context"])) for row in dev]) < 0.45


def test_synthetic_qa_answer_is_the_first_word_of_the_asked_theme():
    from mtl.data.bundled.synthetic import THEMES

    singular = {"animal": "ANIMAL", "food": "FOOD", "vehicle": "VEHICLE"}
    for row in bundled_rows("synthetic_qa")[2]:
        theme = singular[row["question"].split()[1]]
        first = next(w for w in row["context"].split() if w in THEMES[theme])
        assert row["answers"]["text"] == [first]
        assert row["context"][: row["answers"]["answer_start"][0]].split().count(first) == 0


@pytest.mark.parametrize("name", ["pydoc_pair", "pydoc_choice", "pydoc_qa"])
def test_most_rows_fit_the_max_length_of_their_task_yaml(name):
    conf = yaml.safe_load((TASK_CONF / f"{name}.yaml").read_text())
    assert conf["source"] == {"bundled": name} and conf["type"] == BUNDLED_TASKS[name][0]
    tokenizer = load_tokenizer()
    dev = bundled_rows(name)[3]
    if name in PAIR_TASKS:
        lengths = [len(tokenizer(r["text"], r["text_pair"])["input_ids"]) for r in dev]
    elif name in CHOICE_TASKS:
        lengths = [
            len(tokenizer(r["context"], f"{r['question']} {c}")["input_ids"])
            for r in dev
            for c in r["choices"]
        ]
    else:
        lengths = [len(tokenizer(r["question"], r["context"])["input_ids"]) for r in dev]
    assert np.median(lengths) < 0.75 * conf["max_length"]
    assert np.mean(np.array(lengths) > conf["max_length"]) < 0.2


def test_max_train_examples_caps_the_train_split_alone():
    """A task's `max_train_examples` (tasks of unequal size): a seeded sample of its train split,
    the dev split whole; with data.max_examples the smaller cap wins."""
    whole = build("pydoc_topic")
    task = build("pydoc_topic", max_train_examples=40)
    assert len(task.train) == 40 and len(task.dev) == len(whole.dev) > 40
    firsts = list(whole.train["input_ids"][:40])
    assert list(task.train["input_ids"]) != firsts  # sampled across the split, not its first rows
    assert len(build("pydoc_topic", max_examples=30, max_train_examples=40).train) == 30
    assert len(build("pydoc_topic", max_examples=50, max_train_examples=40).train) == 40
    with pytest.raises(MtlError, match=r"task.pydoc_topic.max_train_examples=0 must be >= 1"):
        TaskConfig(type="sequence_classification", source={}, max_train_examples=0).check(
            "pydoc_topic"
        )
