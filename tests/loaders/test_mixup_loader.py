"""MixupLoader: one batch of every task per step, padded, concatenated and interleaved."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mtl.loaders import MixupLoader

KINDS = {"cls": "class", "tag": "tokens", "reg": "regression"}


def mixed_tasks(make_task, sizes, pad_token_id=0):
    """One task of each label type: Long[B], Long[B, L] (pad -100) and Float[B]."""
    return {
        name: make_task(name, sizes[name], 2, KINDS[name], pad_token_id=pad_token_id)
        for name in sizes
    }


def expected_label(kind: str, i: int, length: int) -> torch.Tensor:
    if kind == "class":
        return torch.tensor(i % 3)
    if kind == "regression":
        return torch.tensor(i / 2)
    labels = torch.full((length,), -100)
    labels[: 1 + i % 4] = torch.arange(1 + i % 4) + i
    return labels


def check_rows(batch: dict, pad_token_id: int) -> None:
    """Every row carries its own example's tokens, mask and label, under its task."""
    n_rows, length = batch["input_ids"].shape
    assert batch["attention_mask"].shape == (n_rows, length)
    assert batch["task_ids"].shape == batch["example_ids"].shape == (n_rows,)
    seen = dict.fromkeys(batch["labels"], 0)
    for row in range(n_rows):
        task = batch["tasks"][batch["task_ids"][row]]
        i = int(batch["example_ids"][row])
        n_tokens = 1 + i % 4
        tokens = torch.full((length,), pad_token_id)
        tokens[:n_tokens] = 5 + i
        assert torch.equal(batch["input_ids"][row], tokens)
        assert torch.equal(batch["attention_mask"][row], (torch.arange(length) < n_tokens).long())
        label = batch["labels"][task][seen[task]]
        assert torch.equal(label, expected_label(KINDS[task], i, length).to(label.dtype))
        seen[task] += 1
    assert seen == {task: len(labels) for task, labels in batch["labels"].items()}


@settings(max_examples=30, deadline=None)
@given(
    cls=st.integers(1, 9),
    tag=st.integers(1, 9),
    reg=st.integers(1, 9),
    exhaust=st.sampled_from(["cycle_to_longest", "each_once", "first"]),
    seed=st.integers(0, 99),
    pad_token_id=st.sampled_from([0, 1]),
)
def test_rows_are_routed_to_their_task_with_their_labels(
    make_task, cls, tag, reg, exhaust, seed, pad_token_id
):
    sizes = {"cls": cls, "tag": tag, "reg": reg}
    loader = MixupLoader(
        mixed_tasks(make_task, sizes, pad_token_id),
        seed=seed,
        exhaust=exhaust,
        pad_token_id=pad_token_id,
    )
    n_batches = {t: -(-n // 2) for t, n in sizes.items()}
    pick = min if exhaust == "first" else max
    assert len(loader) == pick(n_batches.values())
    seen = []
    for step, batch in enumerate(loader):
        assert batch["tasks"] == ["cls", "tag", "reg"]
        labels = batch["labels"]
        if "cls" in labels:
            assert labels["cls"].dtype == torch.long and labels["cls"].ndim == 1
        if "tag" in labels:
            assert labels["tag"].shape[1] == batch["input_ids"].shape[1]
        if "reg" in labels:
            assert labels["reg"].dtype == torch.float32
        active = [t for t in sizes if exhaust != "each_once" or step < n_batches[t]]
        assert list(batch["labels"]) == active
        check_rows(batch, pad_token_id)
        seen += [
            (batch["tasks"][t], int(i))
            for t, i in zip(batch["task_ids"], batch["example_ids"], strict=True)
        ]
    if exhaust == "each_once":
        assert sorted(seen) == sorted((t, i) for t, n in sizes.items() for i in range(n))


def test_batch_size_is_the_sum_of_the_task_batch_sizes(make_tasks):
    tasks = {**make_tasks({"a": 12}, 3), **make_tasks({"b": 8}, 2)}
    for batch in MixupLoader(tasks):
        assert batch["input_ids"].shape[0] == 5
        assert batch["task_ids"].tolist().count(0) == 3


def test_rows_are_shuffled_deterministically(make_tasks):
    def run(seed):
        return [
            b["task_ids"].tolist() for b in MixupLoader(make_tasks({"a": 8, "b": 8}, 4), seed=seed)
        ]

    assert run(0) == run(0)
    assert run(0) != run(1)
    assert any(ids != sorted(ids) for ids in run(0))


def test_a_task_that_runs_out_restarts_with_a_new_shuffle(make_tasks, keys):
    tasks = make_tasks({"long": 12, "short": 4}, 2)  # 6 and 2 batches per pass
    loader = MixupLoader(tasks)
    assert len(loader) == 6
    short = []
    for batch in loader:
        short.append(sorted(batch["example_ids"][batch["task_ids"] == 1].tolist()))
    passes = [short[0:2], short[2:4], short[4:6]]
    assert all(sorted(sum(p, [])) == [0, 1, 2, 3] for p in passes)
    assert len({str(p) for p in passes}) > 1
    assert tasks["short"].batch_sampler.epochs_set == [0, 1, 2]


def test_steps_per_epoch_and_target_shares(make_tasks):
    loader = MixupLoader(make_tasks({"a": 12, "b": 4}, 2), steps_per_epoch=4)
    assert [len(loader), len(list(loader)), len(list(loader))] == [4, 4, 4]
    assert loader.stats["b"]["batches"] == 8
    assert loader.target_shares() == pytest.approx({"a": 0.5, "b": 0.5})
    uneven = MixupLoader({**make_tasks({"a": 12}, 3), **make_tasks({"b": 4}, 1)})
    assert uneven.target_shares() == pytest.approx({"a": 0.75, "b": 0.25})


def test_merge_falls_back_to_torch_for_tensors_numpy_cannot_view():
    from mtl.loaders.mixup import _merge_rows, _take

    parts = [torch.rand(2, 3), None, torch.rand(3, 1)]
    spans, perm = [(0, 2), (2, 4), (4, 7)], np.array([6, 0, 3, 1, 5, 2, 4])
    fast = _merge_rows(parts, spans, 7, 4, -1, perm)
    grads = [None if p is None else p.clone().requires_grad_() for p in parts]
    slow = _merge_rows(grads, spans, 7, 4, -1, perm)  # .numpy() refuses: the torch path
    assert torch.equal(fast, slow.detach())
    assert fast[1].tolist() == [*parts[0][0].tolist(), -1.0] and fast[2].eq(0).all()
    assert torch.equal(_take(grads[2], np.array([2, 0])).detach(), parts[2][[2, 0]])


def test_each_task_keeps_the_order_of_its_own_rows(make_tasks):
    tasks = make_tasks({"a": 12, "b": 12}, 6)
    own = {name: [b["example_ids"].tolist() for b in loader] for name, loader in tasks.items()}
    loader = MixupLoader(make_tasks({"a": 12, "b": 12}, 6), seed=3)
    interleaved = False
    for step, batch in enumerate(loader):
        ids, task_ids = batch["example_ids"].tolist(), batch["task_ids"].tolist()
        for t, name in enumerate(batch["tasks"]):
            assert [i for i, k in zip(ids, task_ids, strict=True) if k == t] == own[name][step]
        interleaved |= task_ids != sorted(task_ids)
    assert interleaved
