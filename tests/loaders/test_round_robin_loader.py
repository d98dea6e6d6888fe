"""RoundRobinLoader: one batch of each task in turn, in the given order."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtl.loaders import RoundRobinLoader

sizes_st = st.dictionaries(st.sampled_from("abcd"), st.integers(1, 9), min_size=1, max_size=4)


@settings(max_examples=40, deadline=None)
@given(sizes=sizes_st)
def test_each_once_rotates_and_drops_used_up_tasks(make_tasks, keys, sizes):
    loader = RoundRobinLoader(make_tasks(sizes, 2))
    batches = {t: -(-n // 2) for t, n in sizes.items()}
    expected = [t for r in range(max(batches.values())) for t in sizes if r < batches[t]]
    for _ in range(2):
        assert len(loader) == len(expected)
        epoch = keys(loader)
        assert [task for task, _ in epoch] == expected
        seen = sorted((task, i) for task, ids in epoch for i in ids)
        assert seen == sorted((task, i) for task, n in sizes.items() for i in range(n))


@settings(max_examples=40, deadline=None)
@given(sizes=sizes_st)
def test_first_gives_every_task_the_shortest_length(make_tasks, keys, sizes):
    loader = RoundRobinLoader(make_tasks(sizes, 2), exhaust="first")
    shortest = min(-(-n // 2) for n in sizes.values())
    assert len(loader) == len(sizes) * shortest
    epoch = keys(loader)
    assert [task for task, _ in epoch] == list(sizes) * shortest
    seen = [(task, i) for task, ids in epoch for i in ids]
    assert len(seen) == len(set(seen))  # no task restarted


def test_cycle_to_longest_restarts_short_tasks_with_a_new_shuffle(make_tasks, keys):
    tasks = make_tasks({"long": 12, "short": 6}, 2)  # 6 and 3 batches per pass
    loader = RoundRobinLoader(tasks, exhaust="cycle_to_longest")
    assert len(loader) == 12
    epoch = keys(loader)
    long_ids = [ids for task, ids in epoch if task == "long"]
    short_ids = [ids for task, ids in epoch if task == "short"]
    assert sorted(i for ids in long_ids for i in ids) == list(range(12))
    assert sorted(i for ids in short_ids[:3] for i in ids) == list(range(6))
    assert sorted(i for ids in short_ids[3:] for i in ids) == list(range(6))
    assert short_ids[:3] != short_ids[3:]
    assert tasks["short"].batch_sampler.epochs_set == [0, 1]
    keys(loader)
    assert tasks["short"].batch_sampler.epochs_set == [0, 1, 2, 3]  # the pass counter persists


@pytest.mark.parametrize("steps", [1, 4, 7])
def test_steps_per_epoch_continues_the_rotation(make_tasks, keys, steps):
    loader = RoundRobinLoader(make_tasks({"a": 4, "b": 2, "c": 6}, 2), steps_per_epoch=steps)
    stream = []
    for _ in range(3):
        assert len(loader) == steps
        stream += [task for task, _ in keys(loader)]
    assert stream == ["a", "b", "c"] * steps


def test_target_shares(make_tasks):
    loader = RoundRobinLoader(make_tasks({"a": 6, "b": 2}, 2))
    assert loader.target_shares() == {"a": 0.75, "b": 0.25}
