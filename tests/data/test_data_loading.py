from collections import Counter

import numpy as np
import pytest
import torch
from datasets import Dataset, disable_progress_bars

from mtl.config import TaskConfig
from mtl.data import (
    TokenizedSplit,
    build_task_from_config,
    load_tokenizer,
    task_dataset,
    task_loader,
)
from mtl.errors import MtlError
from mtl.samplers import BlockShuffleBatchSampler, RandomBatchSampler

disable_progress_bars()


def make_task_loader(task, split="train", *, batch_size, sampler="random", sort_bs_num=None, **kw):
    """A task loader over `split` with the named sampler, as the trainer builds it."""
    lengths = task.splits[split]["length"]
    if sampler == "random":
        batches = RandomBatchSampler(lengths, batch_size, **kw)
    else:
        batches = BlockShuffleBatchSampler(lengths, batch_size, sort_bs_num=sort_bs_num, **kw)
    return task_loader(task, batches, split)


@pytest.fixture(scope="module")
def tasks():
    tokenizer = load_tokenizer()
    return {
        kind: build_task_from_config(
            name, TaskConfig(type=kind, source={"bundled": name, "size": 150}), tokenizer, seed=2
        )
        for name, kind in [
            ("synthetic_cls", "sequence_classification"),
            ("synthetic_tag", "token_classification"),
            ("synthetic_reg", "regression"),
        ]
    }


@pytest.mark.parametrize("sampler", ["random", "block_shuffle"])
@pytest.mark.parametrize("kind", ["sequence_classification", "token_classification", "regression"])
def test_one_epoch_covers_every_example_once(tasks, sampler, kind):
    task = tasks[kind]
    for split, ds in (("train", task.train), ("dev", task.dev)):
        loader = make_task_loader(task, split, batch_size=16, sampler=sampler, sort_bs_num=2)
        seen = Counter()
        for batch in loader:
            assert batch["task"] == task.name
            assert batch["input_ids"].shape == batch["attention_mask"].shape
            assert batch["input_ids"].shape[1] == batch["attention_mask"].sum(1).max()
            lengths = np.asarray(ds["length"])[batch["example_ids"].numpy()]
            assert batch["attention_mask"].sum(1).tolist() == lengths.tolist()
            if kind == "token_classification":
                assert batch["labels"].shape == batch["input_ids"].shape
            assert batch["labels"].dtype == (torch.float32 if kind == "regression" else torch.long)
            seen.update(batch["example_ids"].tolist())
        assert seen == Counter(range(len(ds)))


def test_batches_match_the_dataset_rows(tasks):
    task = tasks["token_classification"]
    loader = make_task_loader(task, batch_size=8, sampler="block_shuffle", seed=5)
    batch = next(iter(loader))
    for row, example_id in enumerate(batch["example_ids"].tolist()):
        expected = task.train[example_id]
        n = expected["length"]
        assert batch["input_ids"][row, :n].tolist() == expected["input_ids"]
        assert batch["labels"][row, :n].tolist() == expected["labels"]
        assert batch["labels"][row, n:].eq(-100).all()


def test_block_shuffle_pads_less_than_random(tasks):
    task = tasks["sequence_classification"]

    def padded_tokens(sampler):
        loader = make_task_loader(task, batch_size=8, sampler=sampler, sort_bs_num=None)
        return sum(batch["input_ids"].numel() for batch in loader)

    assert padded_tokens("block_shuffle") < padded_tokens("random")


def test_tokenized_split_reads_a_selected_view(tasks):
    ds = tasks["regression"].train.select([5, 2, 9])
    split = TokenizedSplit(ds)
    assert len(split) == 3
    assert split[1]["input_ids"].tolist() == ds[1]["input_ids"]
    packed = split.__getitems__([2, 0])
    assert packed.example_ids.tolist() == [9, 5]
    assert packed.lengths.tolist() == [ds[2]["length"], ds[0]["length"]]


def test_sharded_dev_covers_every_example(tasks):
    task = tasks["sequence_classification"]
    seen = set()
    for rank in range(2):
        loader = make_task_loader(task, "dev", batch_size=4, num_replicas=2, rank=rank)
        seen.update(i for batch in loader for i in batch["example_ids"].tolist())
    assert seen == set(range(len(task.dev)))


def test_unknown_split_raises(tasks):
    with pytest.raises(MtlError, match="unknown split 'test'"):
        task_dataset(tasks["regression"], "test")
    with pytest.raises(MtlError, match="unknown split 'val'"):
        task_dataset(tasks["regression"], "val")


def label_rows_split(labels):
    ds = Dataset.from_dict(
        {
            "input_ids": [[1, 2, 3][: 1 + i % 3] for i in range(len(labels))],
            "labels": labels,
            "example_id": list(range(len(labels))),
        }
    )
    return ds.select([3, 0, 2])  # a view: row_labels reads the rows in the view's order


def test_row_labels_reads_a_list_column_as_one_label_row_per_example():
    split = TokenizedSplit(label_rows_split([[0, 1], [2, 3], [4, 5], [6, 7]]))
    assert split.token_labels
    assert split.row_labels(np.float32) is split and not split.token_labels
    assert split.labels.dtype == np.float32
    assert split[0]["labels"].tolist() == [6.0, 7.0]
    packed = split.__getitems__([2, 0])
    assert packed.labels.tolist() == [[4.0, 5.0], [6.0, 7.0]]
    assert packed.example_ids.tolist() == [2, 3]


def test_row_labels_refuses_rows_of_different_sizes_and_scalar_labels():
    with pytest.raises(MtlError, match="label rows of different sizes"):
        TokenizedSplit(label_rows_split([[0, 1], [2], [4, 5], [6]])).row_labels()
    with pytest.raises(MtlError, match="not a list column"):
        TokenizedSplit(label_rows_split([0, 1, 2, 3])).row_labels()
