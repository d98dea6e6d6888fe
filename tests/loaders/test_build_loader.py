"""Composite loaders as training builds them (`loader=<name>`), dry_run, and the checks and
counters every composite loader shares."""

import pytest

from mtl.artifacts import config_dir
from mtl.errors import MtlError
from mtl.loaders import MixupLoader, RandomLoader, RoundRobinLoader, SequentialLoader, dry_run

# The options of the `loader` group: the files of mtl's conf/loader/.
LOADER_NAMES = sorted(path.stem for path in (config_dir() / "loader").glob("*.yaml"))


def test_the_group_lists_the_built_in_loaders():
    assert LOADER_NAMES == ["mixup", "random", "round_robin", "sequential"]


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("sequential", SequentialLoader),
        ("round_robin", RoundRobinLoader),
        ("random", RandomLoader),
        ("mixup", MixupLoader),
    ],
)
def test_build_by_name(make_tasks, build_loader, name, cls):
    loader = build_loader(name, make_tasks({"a": 4, "b": 2}), seed=1)
    assert type(loader) is cls and loader.seed == 1


@pytest.mark.parametrize("name", LOADER_NAMES)
def test_one_task_yields_its_own_batches(make_tasks, build_loader, keys, name):
    """Training builds a composite also for one task: one epoch is one pass over that task's
    loader, its batches in their order."""
    loader = build_loader(name, make_tasks({"only": 5}))
    alone = make_tasks({"only": 5})["only"]
    assert len(loader) == len(alone) == 3
    assert [ids for _, ids in keys(loader)] == [ids for _, ids in keys(alone)]


def test_one_task_still_checks_the_options(make_tasks, build_loader):
    with pytest.raises(MtlError, match="weighting"):
        build_loader("random", make_tasks({"only": 4}), weighting="bogus")


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(MtlError, match="mixup, random, round_robin, sequential"):
        dry_run("zip", {"a": 4, "b": 2})


@pytest.mark.parametrize("name", LOADER_NAMES)
@pytest.mark.parametrize(
    ("tasks", "options", "message"),
    [
        ({}, {}, "non-empty"),
        ({"a": range(3), "empty": range(0)}, {}, "'empty'"),
        ({"a": range(3), "nolen": iter([1])}, {}, "'nolen'"),
        ({"a": range(3)}, {"exhaust": "sometimes"}, "exhaust"),
        ({"a": range(3)}, {"steps_per_epoch": 0}, "steps_per_epoch"),
        ({"a": range(3)}, {"steps_per_epoch": 2, "exhaust": "each_once"}, "only one"),
        ({"a": range(3)}, {"seed": -1}, "seed"),
    ],
)
def test_bad_input_fails_at_construction(build_loader, name, tasks, options, message):
    with pytest.raises(MtlError, match=message):
        build_loader(name, tasks, **options)


def test_dry_run_summarises_one_epoch():
    text = dry_run("mixup", {"qa": 10, "ner": 4})
    assert "10 steps" in text and "qa" in text and "ner" in text
    assert "2.50" in text  # ner: 10 batches = 2.5 passes
    text = dry_run("random", {"a": 3, "b": 5}, seed=2, weighting="uniform", epoch=1)
    assert "8 steps" in text and "epoch 1" in text
    assert "7 steps" in dry_run("round_robin", {"a": 3}, steps_per_epoch=7)
    with pytest.raises(MtlError, match="'a'"):
        dry_run("random", {"a": 0, "b": 2})


def test_epochs_advance_only_after_a_completed_iteration(make_tasks, keys):
    loader = SequentialLoader(make_tasks({"a": 4, "b": 2}), seed=0)
    first = next(iter(loader))
    assert loader.epoch == 0
    epoch0 = keys(loader)
    assert epoch0[0] == keys([first])[0]  # an unfinished iteration starts the epoch again
    assert loader.epoch == 1
    loader.set_epoch(0)
    assert len(keys(loader)) == len(epoch0)
    with pytest.raises(MtlError, match="epoch"):
        loader.set_epoch(-1)


@pytest.mark.parametrize("name", LOADER_NAMES)
def test_target_shares_add_up_to_one(make_tasks, build_loader, name):
    shares = build_loader(name, make_tasks({"a": 6, "b": 2, "c": 3})).target_shares()
    assert list(shares) == ["a", "b", "c"]
    assert sum(shares.values()) == pytest.approx(1.0)


def test_a_mixed_batch_sums_its_task_batches_num_tokens(make_tasks, build_loader):
    tasks = make_tasks({"a": 5, "b": 2}, 2)
    for loader in tasks.values():
        collate = loader.collate_fn
        loader.collate_fn = lambda rows, collate=collate: {**collate(rows), "num_tokens": 100}
    batches = list(build_loader("mixup", tasks, exhaust="each_once"))
    assert [b["num_tokens"] for b in batches] == [200, 100, 100]
