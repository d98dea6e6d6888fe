import numpy as np
import pytest
from datasets import disable_progress_bars

from mtl.data import BUNDLED_TASKS, TOPIC_CLASSES, build_task, load_tokenizer, pydoc_paragraphs
from mtl.data.bundled import bundled_rows, code_words
from mtl.errors import MtlError

disable_progress_bars()


def build(name, **kwargs):
    task_type = BUNDLED_TASKS[name][0]
    source = {"bundled": name, **kwargs.pop("source", {})}
    return build_task(name, type=task_type, source=source, tokenizer=load_tokenizer(), **kwargs)


@pytest.mark.parametrize("name", sorted(BUNDLED_TASKS))
def test_bundled_task_builds_with_consistent_columns(name):
    task = build(name, max_examples=200)
    assert task.type == BUNDLED_TASKS[name][0]
    for ds in (task.train, task.dev):
        assert len(ds) > 0
        assert {"input_ids", "attention_mask", "labels", "length", "example_id"} <= set(
            ds.column_names
        )
        assert list(ds["example_id"]) == list(range(len(ds)))
        for ids, mask, length, labels in zip(
            ds["input_ids"], ds["attention_mask"], ds["length"], ds["labels"], strict=True
        ):
            assert length == len(ids) == sum(mask) <= 256
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
        build_task("t", type="regression", source={"bundled": "nope"}, tokenizer=load_tokenizer())
    with pytest.raises(MtlError, match="task 't'"):  # pydoc_code's tags are not numbers
        build_task(
            "t", type="regression", source={"bundled": "pydoc_code"}, tokenizer=load_tokenizer()
        )
