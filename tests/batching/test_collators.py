import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mtl.batching import IGNORE_INDEX, PackedRows
from mtl.config import TaskConfig
from mtl.errors import MtlError
from mtl.task_types import task_type_class


def task_collator(task_type, task_name, *, pad_token_id, pad_to_multiple_of=None):
    """The collator training uses for one task of `task_type`: its task type's own."""
    config = TaskConfig(type=task_type, source={})
    task = task_type_class(task_type, task_name)(task_name, config)
    return task.collator(pad_token_id, pad_to_multiple_of)


def examples(lengths, token_labels=False, regression=False):
    rows = []
    for i, n in enumerate(lengths):
        ids = list(range(100 + i, 100 + i + n))
        if token_labels:
            labels = [-100] + [j % 2 for j in range(n - 2)] + [-100]
        else:
            labels = i * 0.5 if regression else i % 3
        rows.append(
            {"input_ids": ids, "attention_mask": [1] * n, "labels": labels, "example_id": 7 * i}
        )
    return rows


def test_sequence_classification_pads_to_batch_max():
    batch = task_collator("sequence_classification", "sst", pad_token_id=0)(examples([3, 5, 2]))
    assert batch["input_ids"].shape == (3, 5)
    assert batch["input_ids"].dtype == batch["attention_mask"].dtype == torch.long
    assert batch["input_ids"][0].tolist() == [100, 101, 102, 0, 0]
    assert batch["attention_mask"].sum(1).tolist() == [3, 5, 2]
    assert batch["labels"].tolist() == [0, 1, 2] and batch["labels"].dtype == torch.long
    assert batch["task"] == "sst"
    assert batch["example_ids"].tolist() == [0, 7, 14] and batch["example_ids"].dtype == torch.long
    assert "token_type_ids" not in batch


def test_pad_to_multiple_of_and_pad_token():
    collate = task_collator("regression", "stsb", pad_token_id=9, pad_to_multiple_of=8)
    batch = collate(examples([3, 9], regression=True))
    assert batch["input_ids"].shape == (2, 16)
    assert batch["input_ids"][0, 3:].eq(9).all()
    assert batch["labels"].dtype == torch.float32 and batch["labels"].tolist() == [0.0, 0.5]


def test_token_labels_padded_with_ignore_index():
    batch = task_collator("token_classification", "ner", pad_token_id=0)(
        examples([4, 6], token_labels=True)
    )
    assert batch["labels"].shape == batch["input_ids"].shape == (2, 6)
    assert batch["labels"][0].tolist() == [-100, 0, 1, -100, -100, -100]
    assert batch["labels"].dtype == torch.long


def test_token_type_ids_kept_when_present():
    rows = examples([2, 3])
    for row in rows:
        row["token_type_ids"] = [1] * len(row["input_ids"])
    batch = task_collator("sequence_classification", "t", pad_token_id=0)(rows)
    assert batch["token_type_ids"].tolist() == [[1, 1, 0], [1, 1, 1]]


def test_bad_arguments_raise():
    with pytest.raises(MtlError, match="task.x.type='ranking' is not a task type"):
        task_collator("ranking", "x", pad_token_id=0)
    with pytest.raises(MtlError, match="pad_to_multiple_of"):
        task_collator("regression", "x", pad_token_id=0, pad_to_multiple_of=0)
    with pytest.raises(MtlError, match="empty batch"):
        task_collator("regression", "x", pad_token_id=0)([])


@settings(max_examples=50, deadline=None)
@given(
    lengths=st.lists(st.integers(2, 40), min_size=1, max_size=12),
    multiple=st.sampled_from([None, 1, 8]),
)
def test_packed_rows_and_dicts_give_the_same_batch(lengths, multiple):
    collate = task_collator(
        "token_classification", "t", pad_token_id=0, pad_to_multiple_of=multiple
    )
    rows = examples(lengths, token_labels=True)
    from_dicts = collate(rows)
    packed = PackedRows(
        input_ids=np.concatenate([r["input_ids"] for r in rows]),
        lengths=np.array(lengths),
        labels=np.concatenate([r["labels"] for r in rows]),
        example_ids=np.array([r["example_id"] for r in rows]),
    )
    from_packed = collate(packed)
    width = from_dicts["input_ids"].shape[1]
    assert (
        width >= max(lengths)
        and width % (multiple or 1) == 0
        and width - max(lengths) < (multiple or 1)
    )
    for key in ("input_ids", "attention_mask", "labels", "example_ids"):
        assert torch.equal(from_dicts[key], from_packed[key])
    for batch in (from_dicts, from_packed):  # the plain-int token count the loaders read
        assert type(batch["num_tokens"]) is int
        assert batch["num_tokens"] == int(batch["attention_mask"].sum()) == sum(lengths)
    for row, n in enumerate(lengths):
        assert from_dicts["input_ids"][row, :n].tolist() == rows[row]["input_ids"]
        assert from_dicts["labels"][row, n:].eq(IGNORE_INDEX).all()
