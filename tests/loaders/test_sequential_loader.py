"""SequentialLoader: every batch of one task, then the next; task order reshuffled per epoch."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtl.errors import MtlError
from mtl.loaders import SequentialLoader

sizes_st = st.dictionaries(st.sampled_from("abcd"), st.integers(1, 9), min_size=1, max_size=4)


def n_batches(n: int, batch_size: int) -> int:
    return -(-n // batch_size)


@settings(max_examples=40, deadline=None)
@given(sizes=sizes_st, batch_size=st.integers(1, 3), seed=st.integers(0, 99))
def test_each_epoch_is_every_example_once_in_task_blocks(make_tasks, keys, sizes, batch_size, seed):
    loader = SequentialLoader(make_tasks(sizes, batch_size), seed=seed)
    for _ in range(2):
        expected_len = len(loader)
        epoch = keys(loader)
        assert len(epoch) == expected_len == sum(n_batches(n, batch_size) for n in sizes.values())
        seen = sorted((task, i) for task, ids in epoch for i in ids)
        assert seen == sorted((task, i) for task, n in sizes.items() for i in range(n))
        switches = sum(a[0] != b[0] for a, b in zip(epoch, epoch[1:], strict=False))
        assert switches == len(sizes) - 1


def test_task_order_is_shuffled_each_epoch_unless_disabled(make_tasks, keys):
    sizes = {name: 2 for name in "abcde"}
    shuffled = SequentialLoader(make_tasks(sizes), seed=0)
    orders = {tuple(dict.fromkeys(task for task, _ in keys(shuffled))) for _ in range(6)}
    assert len(orders) > 1
    fixed = SequentialLoader(make_tasks(sizes), shuffle_tasks=False)
    orders = {tuple(dict.fromkeys(task for task, _ in keys(fixed))) for _ in range(3)}
    assert orders == {tuple("abcde")}


def test_same_seed_same_run_and_a_new_shuffle_every_epoch(make_tasks, keys):
    sizes = {"a": 8, "b": 6}
    runs = []
    for _ in range(2):
        tasks = make_tasks(sizes)
        loader = SequentialLoader(tasks, seed=5)
        runs.append([keys(loader) for _ in range(3)])
    assert runs[0] == runs[1]
    assert len({tuple(epoch) for epoch in runs[0]}) == 3
    assert tasks["a"].batch_sampler.epochs_set == [0, 1, 2]  # one new pass per epoch


@settings(max_examples=30, deadline=None)
@given(sizes=sizes_st, steps=st.integers(1, 10), seed=st.integers(0, 99))
def test_steps_per_epoch_runs_the_task_stream_on(make_tasks, keys, sizes, steps, seed):
    loader = SequentialLoader(make_tasks(sizes, 2), seed=seed, steps_per_epoch=steps)
    total = sum(n_batches(n, 2) for n in sizes.values())
    stream = []
    while len(stream) < 2 * total:
        assert len(loader) == steps
        stream += keys(loader)
    seen = sorted((task, i) for task, ids in stream[: 2 * total] for i in ids)
    assert seen == sorted((task, i) for task, n in sizes.items() for i in range(n) for _ in "12")


@pytest.mark.parametrize("exhaust", ["first", "cycle_to_longest", "bogus"])
def test_other_exhaust_policies_are_rejected(make_tasks, exhaust):
    with pytest.raises(MtlError, match="exhaust"):
        SequentialLoader(make_tasks({"a": 2, "b": 2}), exhaust=exhaust)
