import json

import datasets
import pandas as pd
import pytest
from datasets import disable_progress_bars

from mtl.config import TaskConfig
from mtl.data import build_task_from_config, load_tokenizer
from mtl.errors import MtlError

disable_progress_bars()

CLS_ROWS = [
    {"text": f"sample sentence number {i}", "label": ["neg", "pos"][i % 2]} for i in range(20)
]
TAG_ROWS = [
    {"text": ["the", "cat", "sat", "xylophonist"], "label": ["O", "ANIMAL", "O", "O"]},
    {"text": ["a", "dog", "barked"], "label": ["O", "ANIMAL", "O"]},
] * 5
REG_ROWS = [{"text": f"value {i}", "label": i / 10} for i in range(20)]


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch):
    """Builders cache under a tmp HF_DATASETS_CACHE, not the user's."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")


def write(path, rows):
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".csv":
        pd.DataFrame(rows).to_csv(path, index=False)
    else:
        pd.DataFrame(rows).to_parquet(path)
    return str(path)


def build(name, source, type="sequence_classification", **kwargs):
    config = TaskConfig(type=type, source=source, **kwargs)
    return build_task_from_config(name, config, load_tokenizer())


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_classification_and_regression_from_files(tmp_path, suffix):
    task = build("cls", {"path": write(tmp_path / f"cls{suffix}", CLS_ROWS)}, dev_fraction=0.25)
    assert task.label_names == ["neg", "pos"]
    assert (len(task.train), len(task.dev)) == (15, 5)
    assert set(task.train["labels"]) <= {0, 1}
    reg = build("reg", {"path": write(tmp_path / f"reg{suffix}", REG_ROWS)}, type="regression")
    assert reg.num_labels == 1 and all(isinstance(y, float) for y in reg.train["labels"])


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_token_classification_from_files_aligns_first_subtokens(tmp_path, suffix):
    path = write(tmp_path / f"tag{suffix}", TAG_ROWS)
    task = build("tag", {"path": path, "dev_path": path}, type="token_classification")
    assert task.label_names == ["ANIMAL", "O"]
    tokenizer = load_tokenizer()
    row = task.dev[0]
    enc = tokenizer(["the", "cat", "sat", "xylophonist"], is_split_into_words=True)
    assert row["input_ids"] == enc["input_ids"]
    expected, previous = [], None
    for word in enc.word_ids():
        first = word is not None and word != previous
        expected.append([1, 0, 1, 1][word] if first else -100)
        previous = word
    assert row["labels"] == expected
    assert expected.count(-100) > 2  # "xylophonist" is split into subtokens


def test_token_text_may_be_a_whitespace_string_and_tags_ids(tmp_path):
    rows = [{"text": "a dog  barked", "label": [0, 1, 0]}] * 4
    task = build("ws", {"path": write(tmp_path / "w.jsonl", rows)}, type="token_classification")
    assert task.label_names == ["0", "1"]
    assert [y for y in task.train[0]["labels"] if y != -100] == [0, 1, 0]


def test_integer_labels_and_given_label_names(tmp_path):
    rows = [{"text": f"t {i}", "label": i % 3} for i in range(12)]
    task = build("ints", {"path": write(tmp_path / "i.jsonl", rows)})
    assert task.label_names == ["0", "1", "2"]
    named = build(
        "named", {"path": write(tmp_path / "n.jsonl", CLS_ROWS)}, label_names=["pos", "neg"]
    )
    assert named.label_names == ["pos", "neg"]


def test_label_out_of_range_names_task_label_and_range(tmp_path):
    train = write(tmp_path / "train.jsonl", [{"text": "a", "label": 0}, {"text": "b", "label": 1}])
    dev = write(tmp_path / "dev.jsonl", [{"text": "c", "label": 7}])
    with pytest.raises(MtlError, match=r"task 'sst'.*label 7.*0\.\.1"):
        build("sst", {"path": train, "dev_path": dev})
    with pytest.raises(MtlError, match=r"task 'sst'.*'maybe'"):
        build("sst", {"path": write(tmp_path / "c.jsonl", CLS_ROWS)}, label_names=["maybe"])


def test_empty_file_missing_column_bad_file_raise(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(MtlError, match="task 'e'.*empty"):
        build("e", {"path": str(empty)})
    header_only = tmp_path / "header.csv"
    header_only.write_text("text,label\n")
    with pytest.raises(MtlError, match="task 'h'"):
        build("h", {"path": str(header_only)})
    path = write(tmp_path / "cls.jsonl", CLS_ROWS)
    with pytest.raises(MtlError, match="task 'm'.*column 'sentence' missing"):
        build("m", {"path": path}, text_column="sentence")
    xml = tmp_path / "data.xml"
    xml.write_text("<rows/>")
    with pytest.raises(MtlError, match="task 'x'.*data\\.xml"):
        build("x", {"path": str(xml)})
    with pytest.raises(MtlError, match="task 'y'.*does not exist"):
        build("y", {"path": str(tmp_path / "missing.jsonl")})
    with pytest.raises(MtlError, match="task.z.type='ranking' is not a task type"):
        build("z", {"path": path}, type="ranking")
    with pytest.raises(MtlError, match="task 'w'.*'bundled', 'path', 'train' or 'hub'"):
        build("w", {"url": "x"})


def test_tags_must_match_words(tmp_path):
    rows = [{"text": ["a", "b"], "label": ["O"]}] * 4
    with pytest.raises(MtlError, match="task 'tag'.*2 words but 1 tags"):
        build("tag", {"path": write(tmp_path / "t.jsonl", rows)}, type="token_classification")
