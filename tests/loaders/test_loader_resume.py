"""Resume: state_dict after k batches, loaded into a fresh loader, continues the run exactly."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtl.errors import MtlError

SIZES = {"a": 7, "b": 3, "c": 5}  # examples; batch size 2 -> 4, 2 and 3 batches per pass

CONFIGS = [
    ("sequential", {}),
    ("sequential", {"shuffle_tasks": False}),
    ("sequential", {"steps_per_epoch": 5}),
    ("round_robin", {}),
    ("round_robin", {"exhaust": "first"}),
    ("round_robin", {"exhaust": "cycle_to_longest"}),
    ("round_robin", {"steps_per_epoch": 4}),
    ("random", {}),
    ("random", {"exhaust": "first"}),
    ("random", {"exhaust": "cycle_to_longest"}),
    ("random", {"weighting": "uniform"}),
    ("random", {"weighting": "temperature", "exhaust": "first"}),
    ("random", {"weighting": {"a": 1.0, "b": 0.0, "c": 2.0}}),
    ("random", {"steps_per_epoch": 7}),
    ("mixup", {}),
    ("mixup", {"exhaust": "each_once"}),
    ("mixup", {"exhaust": "first"}),
    ("mixup", {"steps_per_epoch": 3}),
]


@pytest.mark.parametrize("resumable", [False, True], ids=["skip-batches", "set_start"])
@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=lambda c: str(c))
@settings(max_examples=30, deadline=None)
@given(epoch=st.integers(0, 1), data=st.data())
def test_resume_at_every_step(
    build_loader, make_tasks, keys, name, options, resumable, epoch, data
):
    build = lambda: build_loader(name, make_tasks(SIZES, resumable=resumable), seed=3, **options)  # noqa: E731
    loader = build()
    for _ in range(epoch):
        keys(loader)
    k = data.draw(st.integers(0, len(loader)), label="k")
    state = loader.state_dict() if k == 0 else None
    full = []
    for batch in loader:
        full.append(keys([batch])[0])
        if len(full) == k:
            state = loader.state_dict()
    following = keys(loader)

    state = json.loads(json.dumps(state))  # plain Python types only
    resumed = build()
    resumed.load_state_dict(state)
    assert keys(resumed) == full[k:]  # empty for k = len: that iteration completes the epoch
    assert keys(resumed) == following
    assert resumed.epoch == loader.epoch == epoch + 2


def test_resume_uses_set_start_when_the_sampler_has_it(build_loader, make_tasks, keys):
    loader = build_loader("round_robin", make_tasks(SIZES, resumable=True))
    iterator = iter(loader)
    for _ in range(5):  # a b c a b: a and c are mid-pass, b is used up
        next(iterator)
    tasks = make_tasks(SIZES, resumable=True)
    resumed = build_loader("round_robin", tasks)
    resumed.load_state_dict(loader.state_dict())
    keys(resumed)
    starts = {name: task.batch_sampler.starts_set for name, task in tasks.items()}
    assert starts == {"a": [2], "b": [], "c": [1]}


def test_set_epoch_to_the_saved_epoch_keeps_the_resume_position(build_loader, make_tasks, keys):
    loader = build_loader("random", make_tasks(SIZES))
    full, state = [], None
    for batch in loader:
        full.append(keys([batch])[0])
        if len(full) == 3:
            state = loader.state_dict()
    resumed = build_loader("random", make_tasks(SIZES))
    resumed.load_state_dict(state)
    resumed.set_epoch(state["epoch"])
    assert keys(resumed) == full[3:]


def test_state_after_the_last_batch_resumes_into_an_empty_iteration(build_loader, make_tasks, keys):
    loader = build_loader("mixup", make_tasks(SIZES))
    for step, _ in enumerate(loader, 1):
        if step == len(loader):
            state = loader.state_dict()
    assert (state["epoch"], state["step"]) == (0, len(loader))
    resumed = build_loader("mixup", make_tasks(SIZES))
    resumed.load_state_dict(state)
    assert keys(resumed) == [] and resumed.epoch == 1
    assert keys(resumed) == keys(loader)


@pytest.mark.parametrize(
    ("change", "message"),
    [({"seed": 4}, "options"), ({"exhaust": "first"}, "options")],
)
def test_load_state_from_a_loader_built_differently_fails(
    build_loader, make_tasks, change, message
):
    state = build_loader("random", make_tasks(SIZES), seed=3).state_dict()
    other = build_loader("random", make_tasks(SIZES), **{"seed": 3, **change})
    with pytest.raises(MtlError, match=message):
        other.load_state_dict(state)


def test_load_state_with_other_tasks_or_sizes_fails(build_loader, make_tasks):
    state = build_loader("random", make_tasks(SIZES)).state_dict()
    with pytest.raises(MtlError, match="tasks"):
        build_loader("random", make_tasks({"a": 7, "b": 3})).load_state_dict(state)
    with pytest.raises(MtlError, match="'c'"):
        build_loader("random", make_tasks({**SIZES, "c": 9})).load_state_dict(state)


@pytest.mark.parametrize(
    "workers", [0, 2, "persistent"], ids=["in-process", "2 loader workers", "2 persistent"]
)
@pytest.mark.parametrize("name", ["random", "mixup"])
def test_resume_with_the_real_samplers(build_loader, make_real_tasks, keys, name, workers):
    """With loader workers torch calls iter(batch_sampler) twice per iteration and reads only
    the second: the resume position must reach the one that yields."""
    loader = build_loader(name, make_real_tasks(SIZES), seed=1)
    full, state = [], None
    for batch in loader:
        full.append(keys([batch])[0])
        if len(full) == 2:
            state = loader.state_dict()
    if workers == "persistent":
        tasks = make_real_tasks(SIZES, num_workers=2, persistent_workers=True)
    else:
        tasks = make_real_tasks(SIZES, num_workers=workers)
    resumed = build_loader(name, tasks, seed=1)
    resumed.load_state_dict(state)
    assert keys(resumed) == full[2:]
    assert keys(resumed) == keys(loader)
