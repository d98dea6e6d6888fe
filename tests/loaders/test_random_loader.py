"""RandomLoader: the task of each step drawn at random from a seeded, precomputed schedule."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtl.errors import MtlError
from mtl.loaders import MixupLoader, RandomLoader

sizes_st = st.dictionaries(st.sampled_from("abcd"), st.integers(1, 9), min_size=1, max_size=4)
weighting_st = st.sampled_from(["proportional", "uniform", "temperature"])


def stand_ins(**batches: int) -> dict[str, range]:
    """Tasks as `range(n)`: enough for the schedule, which only needs len()."""
    return {task: range(n) for task, n in batches.items()}


@settings(max_examples=40, deadline=None)
@given(sizes=sizes_st, seed=st.integers(0, 99))
def test_each_once_covers_every_example_once(make_tasks, keys, sizes, seed):
    loader = RandomLoader(make_tasks(sizes, 2), seed=seed)
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


def test_uniform_sets_the_shares_and_spreads_them_over_the_epoch():
    """Under each_once the epoch keeps its length (22 steps) and uniform weights give each task
    11 of them; the small task starts new passes, spread over the epoch, not front-loaded."""
    schedules = [
        RandomLoader(stand_ins(small=2, large=20), seed=s, weighting="uniform").schedule(0)
        for s in range(500)
    ]
    assert all(len(s) == 22 and (np.bincount(s) == [11, 11]).all() for s in schedules)
    last_small = np.mean([np.flatnonzero(s == 0)[-1] for s in schedules])
    assert last_small > 18  # equal shares in random order: its last step is near the end


def mix(loader: RandomLoader) -> list[float]:
    return list(loader.mix_weights().values())


def test_temperature_weights():
    loader = RandomLoader(stand_ins(a=4, b=100), weighting="temperature", temperature=2.0)
    assert np.allclose(mix(loader), np.array([2.0, 10.0]) / 12)
    capped = RandomLoader(stand_ins(a=4, b=100), weighting="temperature", size_cap=16)
    assert np.allclose(mix(capped), np.array([2.0, 4.0]) / 6)
    one = RandomLoader(stand_ins(a=4, b=100), weighting="temperature", temperature=1)
    assert np.allclose(mix(one), np.array([4, 100]) / 104)


def test_steps_per_epoch_follows_the_weights_over_the_run(make_tasks, keys):
    loader = RandomLoader(
        stand_ins(a=3, b=5, c=2), weighting={"a": 1, "b": 0, "c": 3}, seed=0, steps_per_epoch=4000
    )
    counts = np.bincount(loader.schedule(0), minlength=3) / 4000
    assert counts.tolist() == [0.25, 0.0, 0.75]  # exactly: the steps are split by the weights
    tasks = make_tasks({"a": 4, "b": 6})
    small = RandomLoader(tasks, steps_per_epoch=3)
    for _ in range(4):
        assert len(small) == len(keys(small)) == 3


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
        ({"weighting": "annealed"}, "needs the run's epochs"),
        ({"weighting": "temperature", "temperature_end": 0, "epochs": 3}, "temperature_end"),
        ({"weighting": "temperature", "temperature_end": -1, "epochs": 3}, "temperature_end"),
        ({"temperature_end": 2, "shape": "step", "epochs": 3}, "shape"),
        ({"stages": [{"until": 3}, {"weighting": "uniform"}]}, "needs the run's epochs"),
        ({"stages": [{"until": 3}, {"until": 2}, {}], "epochs": 2}, "does not come after 3"),
        ({"stages": [{"until": 10}, {}], "epochs": 2}, "past the run's end"),
        ({"stages": [{"until": 0.5}, {"until": 0.9}], "epochs": 2}, "last stage runs to the end"),
        ({"stages": [{"until": 2, "weight": 1}, {}], "epochs": 2}, "unknown key"),
        ({"stages": [{"until": 2}, {}], "exhaust": "first", "epochs": 2}, "fixed number"),
        ({"max_passes": 0}, "max_passes"),
        ({"max_passes": 2, "exhaust": "first"}, "no task makes a second pass"),
        ({"max_passes": {"b": 0.5}, "exhaust": "cycle_to_longest"}, "give it at least 1"),
        ({"max_passes": {"zz": 2}}, "'zz'"),
        ({"max_passes": 1, "weighting": {"a": 0, "b": 1}, "steps_per_epoch": 9}, "reached its cap"),
    ],
)
@pytest.mark.parametrize("loader", [RandomLoader, MixupLoader])
def test_bad_options_fail_at_construction(loader, options, message):
    """Each rule of a mixture's options holds for both loaders that mix by weights (a mixup
    given any of them is weighted; its epochs are each_once or steps_per_epoch alone)."""
    if loader is MixupLoader and "exhaust" in options:
        pytest.skip("a weighted mixup refuses any exhaust but each_once")
    with pytest.raises(MtlError, match=message):
        loader(stand_ins(a=2, b=3), **options).schedule(0)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=2, max_size=4),
    weighting=st.sampled_from(["uniform", "temperature", "annealed", "explicit"]),
    seed=st.integers(0, 99),
    epoch=st.integers(0, 3),
)
def test_each_once_shares_are_the_weights_within_one_step(sizes, weighting, seed, epoch):
    names = [str(i) for i in range(len(sizes))]
    chosen = (
        dict(zip(names, [1.0, 2.5, 0.5, 4.0], strict=False))
        if weighting == "explicit"
        else weighting
    )
    loader = RandomLoader(stand_ins(**dict(zip(names, sizes, strict=True))), seed=seed,
                          weighting=chosen, epochs=4)  # fmt: skip
    schedule = loader.schedule(epoch)
    length = sum(sizes)
    assert len(schedule) == length
    expected = loader.mixture.weights(epoch) * length
    assert np.abs(np.bincount(schedule, minlength=len(sizes)) - expected).max() < 1


def test_annealed_alpha_by_epoch():
    """Stickland & Murray: p_t ~ n_t ** a, a = 1 - 0.8 (e - 1) / (E - 1) for epochs e = 1..E."""
    loader = RandomLoader(stand_ins(a=4, b=100), weighting="annealed", epochs=3)
    for epoch, alpha in enumerate([1.0, 0.6, 0.2]):
        w = np.array([4.0, 100.0]) ** alpha
        assert np.allclose(loader.mixture.weights(epoch), w / w.sum()), epoch
    assert np.allclose(
        loader.mixture.weights(2), [0.3444, 0.6556], atol=1e-4
    )  # 4**.2 = 1.3195, 100**.2 = 2.5119


@pytest.mark.parametrize(
    ("shape", "epochs", "expected"),
    [
        ("linear", 3, [1.0, 2.0, 3.0]),
        ("cosine", 3, [1.0, 2.0, 3.0]),
        ("linear", 5, [1.0, 1.5, 2.0, 2.5, 3.0]),
        ("cosine", 5, [1.0, 1.2929, 2.0, 2.7071, 3.0]),  # 1 + 2 (1 - cos(pi x)) / 2
    ],
)
def test_temperature_schedule(shape, epochs, expected):
    loader = RandomLoader(stand_ins(a=4, b=100), weighting="temperature", temperature=1,
                          temperature_end=3, shape=shape, epochs=epochs)  # fmt: skip
    for epoch, temperature in enumerate(expected):
        w = np.array([4.0, 100.0]) ** (1 / temperature)
        assert np.allclose(loader.mixture.weights(epoch), w / w.sum(), atol=1e-4), epoch


def test_stages_switch_at_the_step_named():
    """A until loader step 7, then B: 10 steps an epoch (5 + 5 batches), 2 epochs."""
    stages = [{"until": 7, "weighting": {"a": 1, "b": 0}}, {"weighting": {"a": 0, "b": 1}}]
    loader = RandomLoader(stand_ins(a=5, b=5), stages=stages, epochs=2, seed=3)
    assert loader.schedule(0).tolist() == [0] * 7 + [1] * 3
    assert loader.schedule(1).tolist() == [1] * 10
    drawn = iter(loader)
    for step in range(1, 11):  # mix_weights: the weights of the step last drawn
        next(drawn)
        assert list(loader.mix_weights().values()) == ([1.0, 0.0] if step <= 7 else [0.0, 1.0])
    by_fraction = RandomLoader(stand_ins(a=5, b=5), stages=[{**stages[0], "until": 0.35},
                                                          stages[1]], epochs=2)  # fmt: skip
    assert by_fraction.schedule(0).tolist() == [0] * 7 + [1] * 3  # 0.35 of 20 steps
    halves = RandomLoader(stand_ins(a=5, b=5), epochs=2, seed=1,
                          stages=[{"until": 0.5, "weighting": "uniform"}, {}])  # fmt: skip
    assert np.bincount(halves.schedule(1)).tolist() == [5, 5]


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=2, max_size=4),
    cap=st.floats(1.0, 3.0),
    weighting=st.sampled_from(["uniform", "temperature", "annealed"]),
    policy=st.sampled_from(["each_once", "cycle_to_longest", "steps"]),
    steps=st.integers(1, 200),
    seed=st.integers(0, 99),
)
def test_caps_are_never_exceeded(sizes, cap, weighting, policy, steps, seed):
    names = [str(i) for i in range(len(sizes))]
    epoch_steps = steps if policy == "steps" else None
    exhaust = None if policy == "steps" else policy
    loader = RandomLoader(stand_ins(**dict(zip(names, sizes, strict=True))), seed=seed,
                          weighting=weighting, max_passes=cap, steps_per_epoch=epoch_steps,
                          exhaust=exhaust, epochs=3)  # fmt: skip
    room = np.floor(cap * np.array(sizes))
    for epoch in range(3):
        if policy == "steps" and steps > room.sum():
            with pytest.raises(MtlError, match="reached its cap"):
                loader.schedule(epoch)
            return
        counts = np.bincount(loader.schedule(epoch), minlength=len(sizes))
        assert (counts <= room).all()
        if policy == "cycle_to_longest":  # ends when the longest has given one pass
            longest = int(np.argmax(sizes))
            assert counts[longest] == sizes[longest] and loader.schedule(epoch)[-1] == longest
        else:
            assert counts.sum() == (steps if policy == "steps" else sum(sizes))


def test_a_capped_tasks_mass_goes_to_the_others():
    """Uniform over a (2 batches) and b (20): a capped at one pass gets 2 of the 22 steps."""
    loader = RandomLoader(stand_ins(a=2, b=20), weighting="uniform", max_passes={"a": 1})
    assert np.bincount(loader.schedule(0)).tolist() == [2, 20]
    free = RandomLoader(stand_ins(a=2, b=20), weighting="uniform")
    assert np.bincount(free.schedule(0)).tolist() == [11, 11]
