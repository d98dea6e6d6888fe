"""RandomLoader: the task of each step drawn at random from a seeded, precomputed schedule."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtl.errors import MtlError
from mtl.loaders import RandomLoader

sizes_st = st.dictionaries(st.sampled_from("abcd"), st.integers(1, 9), min_size=1, max_size=4)
weighting_st = st.sampled_from(["proportional", "uniform", "temperature"])


def stand_ins(**batches: int) -> dict[str, range]:
    """Tasks as `range(n)`: enough for the schedule, which only needs len()."""
    return {task: range(n) for task, n in batches.items()}


@settings(max_examples=40, deadline=None)
@given(sizes=sizes_st, weighting=weighting_st, seed=st.integers(0, 99))
def test_each_once_covers_every_example_once(make_tasks, keys, sizes, weighting, seed):
    loader = RandomLoader(make_tasks(sizes, 2), seed=seed, weighting=weighting)
    for _ in range(2):
        assert len(loader) == sum(-(-n // 2) for n in sizes.values())
        epoch = keys(loader)
        assert len(epoch) == sum(-(-n // 2) for n in sizes.values())
        seen = sorted((task, i) for task, ids in epoch for i in ids)
        assert seen == sorted((task, i) for task, n in sizes.items() for i in range(n))


def test_same_seed_same_run_other_seed_or_epoch_other_order(make_tasks, keys):
    sizes = {"a": 9, "b": 7, "c": 5}

    def run(seed):
        return keys(RandomLoader(make_tasks(sizes), seed=seed))

    assert run(1) == run(1)
    assert run(1) != run(2)
    loader = RandomLoader(make_tasks(sizes), seed=1)
    assert keys(loader) != keys(loader)


def test_proportional_is_a_uniform_random_interleaving():
    # a has 2 batches, b has 2: all 6 interleavings are equally likely
    counts = Counter(
        tuple(RandomLoader(stand_ins(a=2, b=2), seed=seed).schedule(0)) for seed in range(3000)
    )
    assert len(counts) == 6
    assert all(abs(c - 500) < 5 * np.sqrt(500) for c in counts.values())


def test_proportional_first_step_and_positions_match_task_sizes():
    schedules = [RandomLoader(stand_ins(a=3, b=9), seed=s).schedule(0) for s in range(2000)]
    p_first_a = np.mean([s[0] == 0 for s in schedules])
    assert abs(p_first_a - 3 / 12) < 0.04
    mean_position_a = np.mean([np.flatnonzero(s == 0).mean() for s in schedules])
    assert abs(mean_position_a - 5.5) < 0.2  # a's batches are spread evenly over steps 0..11


def test_uniform_front_loads_small_tasks():
    schedules = [
        RandomLoader(stand_ins(small=2, large=20), seed=s, weighting="uniform").schedule(0)
        for s in range(1000)
    ]
    assert abs(np.mean([s[0] == 0 for s in schedules]) - 0.5) < 0.06
    last_small = np.mean([np.flatnonzero(s == 0)[-1] for s in schedules])
    assert last_small < 5  # proportional would put it near step 14.7 of 22


def test_temperature_weights():
    loader = RandomLoader(stand_ins(a=4, b=100), weighting="temperature", temperature=2.0)
    assert np.allclose(loader.weights, [2.0, 10.0])
    capped = RandomLoader(stand_ins(a=4, b=100), weighting="temperature", size_cap=16)
    assert np.allclose(capped.weights, [2.0, 4.0])
    one = RandomLoader(stand_ins(a=4, b=100), weighting="temperature", temperature=1)
    assert np.allclose(one.weights, [4, 100])


def test_steps_per_epoch_follows_the_weights_over_the_run(make_tasks, keys):
    loader = RandomLoader(
        stand_ins(a=3, b=5, c=2), weighting={"a": 1, "b": 0, "c": 3}, seed=0, steps_per_epoch=4000
    )
    counts = np.bincount(loader.schedule(0), minlength=3) / 4000
    assert np.allclose(counts, [0.25, 0.0, 0.75], atol=0.03)
    tasks = make_tasks({"a": 4, "b": 6})
    small = RandomLoader(tasks, steps_per_epoch=3)
    for _ in range(4):
        assert len(small) == 3
        keys(small)
    assert sum(small.stats[t]["batches"] for t in "ab") == 12


def test_explicit_zero_weight_leaves_the_task_out(make_tasks, keys):
    loader = RandomLoader(make_tasks({"a": 4, "b": 4, "c": 4}), weighting={"a": 1, "b": 0, "c": 1})
    epoch = keys(loader)
    assert len(epoch) == 4 and {task for task, _ in epoch} == {"a", "c"}


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=2, max_size=4),
    seed=st.integers(0, 999),
    weighting=weighting_st,
)
def test_first_ends_when_the_first_task_runs_out(sizes, seed, weighting):
    loader = RandomLoader(
        {str(i): range(n) for i, n in enumerate(sizes)},
        seed=seed,
        weighting=weighting,
        exhaust="first",
    )
    schedule = loader.schedule(0)
    counts = np.bincount(schedule, minlength=len(sizes))
    assert len(loader) == len(schedule)
    assert counts[schedule[-1]] == sizes[schedule[-1]]
    assert (counts <= sizes).all() and (counts == sizes).sum() == 1


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=2, max_size=4),
    seed=st.integers(0, 999),
    weighting=weighting_st,
)
def test_cycle_to_longest_ends_when_the_longest_is_seen_once(sizes, seed, weighting):
    loader = RandomLoader(
        {str(i): range(n) for i, n in enumerate(sizes)},
        seed=seed,
        weighting=weighting,
        exhaust="cycle_to_longest",
    )
    schedule = loader.schedule(0)
    longest = int(np.argmax(sizes))
    assert schedule[-1] == longest
    assert np.bincount(schedule, minlength=len(sizes))[longest] == sizes[longest]


def test_a_task_that_runs_out_restarts_with_a_fresh_shuffle(make_tasks, keys):
    tasks = make_tasks({"long": 40, "short": 6}, 2)
    loader = RandomLoader(tasks, weighting="uniform", exhaust="cycle_to_longest", seed=0)
    short = [ids for task, ids in keys(loader) if task == "short"]
    assert len(short) >= 6
    assert sorted(i for ids in short[3:6] for i in ids) == list(range(6))
    assert short[:3] != short[3:6]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"weighting": "bogus"}, "weighting"),
        ({"weighting": {"a": 1, "zz": 1}}, "'zz'"),
        ({"weighting": {"a": 1}}, "'b'"),
        ({"weighting": {"a": 0, "b": 0}}, "all weights"),
        ({"weighting": {"a": -1, "b": 1}}, "'a'"),
        ({"weighting": "temperature", "temperature": 0}, "temperature"),
        ({"weighting": "temperature", "size_cap": 0}, "size_cap"),
        ({"exhaust": "longest"}, "exhaust"),
    ],
)
def test_bad_options_fail_at_construction(options, message):
    with pytest.raises(MtlError, match=message):
        RandomLoader(stand_ins(a=2, b=3), **options)
