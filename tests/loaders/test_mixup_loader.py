"""MixupLoader: one batch of every task per step (or, weighted, task batches split by the
weights), padded, concatenated and interleaved."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mtl.errors import MtlError
from mtl.loaders import MixupLoader
from mtl.testing import check_loader
from tests.loaders.conftest import batch_key

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
    first, second = list(loader), list(loader)
    assert [len(loader), len(first), len(second)] == [4, 4, 4]
    assert all((batch["task_ids"] == 1).any() for batch in first + second)  # b every step
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


# -- weighted: task batches per step split by the weights --------------------------------------


def weighted(make_tasks, sizes=None, **options) -> MixupLoader:
    return MixupLoader(make_tasks(sizes or {"a": 40, "b": 12, "c": 6}), **options)


@pytest.mark.parametrize("seed", range(3))
def test_a_long_epoch_spreads_each_tasks_extra_batches_evenly(seed):
    rng = np.random.default_rng(seed)
    sizes = {f"t{i}": int(n) for i, n in enumerate(rng.integers(1, 400, size=6))}
    weights = {name: float(w) for name, w in zip(sizes, rng.random(6), strict=True)}
    loader = MixupLoader({n: range(s) for n, s in sizes.items()}, weighting=weights,
                         batches_per_step=5, seed=seed)  # fmt: skip
    full = loader.schedule(0)[: loader.slots // 5]
    assert (full.sum(axis=1) == 5).all() and (full.max(axis=0) - full.min(axis=0) <= 1).all()
    steps = np.arange(1, len(full) + 1)[:, None]
    assert (np.abs(full.cumsum(axis=0) - steps * full.mean(axis=0)) < 3).all()


@pytest.mark.parametrize(
    ("weighting", "per_step"),
    [("uniform", None), ("proportional", 4), ({"a": 1, "b": 3, "c": 0}, 2)],
)
def test_each_step_holds_the_weights_share_of_its_batches_within_one(
    make_tasks, weighting, per_step
):
    loader = weighted(make_tasks, weighting=weighting, batches_per_step=per_step)
    k = per_step or 3
    p = loader.mixture.weights(0)
    schedule = loader.schedule(0)
    in_play = sum(n for n, w in zip([20, 6, 3], p, strict=True) if w > 0)
    assert len(schedule) == len(loader) == -(-in_play // k)  # each_once: every batch in play
    assert schedule.sum() == in_play
    assert (schedule[:-1].sum(axis=1) == k).all()  # the last step: what is left
    # Every full step holds each task's average per step, rounded down or up.
    full = schedule[: in_play // k]
    assert (full.max(axis=0) - full.min(axis=0) <= 1).all()
    assert (np.abs(full - k * p) < 1 + 1 / len(full)).all()
    # ...and the steps that hold one more are spread over the epoch, not bunched together.
    steps = np.arange(1, len(full) + 1)[:, None]
    assert (np.abs(full.cumsum(axis=0) - steps * full.mean(axis=0)) < 3).all()
    assert (np.abs(schedule.sum(axis=0) - in_play * p) < 1).all()  # largest remainders
    taken = {n: 0 for n in loader.names}
    for batch in loader:
        for name in loader.names:
            taken[name] += int((batch["task_ids"] == loader.names.index(name)).sum())
    rows = dict(zip(loader.names, schedule.sum(axis=0) * 2, strict=True))  # batch size 2
    assert taken == {n: int(r) for n, r in rows.items()}


def test_a_task_with_two_batches_in_a_step_gives_both_joined(make_task):
    tasks = mixed_tasks(make_task, {"cls": 4, "tag": 16, "reg": 4})
    loader = MixupLoader(tasks, weighting={"cls": 1, "tag": 2, "reg": 1}, batches_per_step=4)
    assert (loader.schedule(0)[:, 1] == 2).all()
    seen = {name: [] for name in loader.names}
    for batch in loader:
        check_rows(batch, 0)
        assert batch["labels"]["tag"].shape[0] == 4  # two batches of 2
        for row in range(len(batch["task_ids"])):
            seen[batch["tasks"][batch["task_ids"][row]]].append(int(batch["example_ids"][row]))
    assert len(seen["tag"]) == len(set(seen["tag"])) == 12  # 6 of its 8 batches, none twice


def test_a_capped_task_is_not_taken_past_its_cap(make_tasks):
    loader = weighted(make_tasks, weighting="uniform", max_passes={"c": 1})
    counts = loader.schedule(0).sum(axis=0)
    assert counts[2] == 3 and counts.sum() == 29


def test_stages_switch_at_their_loader_step(make_tasks):
    stages = [{"until": 4, "weighting": {"a": 1, "b": 0, "c": 0}}, {"weighting": "uniform"}]
    sizes = {"a": 40, "b": 14, "c": 6}  # 30 batches: 10 steps of 3
    loader = weighted(make_tasks, sizes, weighting="uniform", stages=stages, epochs=1)
    schedule = loader.schedule(0)
    assert (schedule[:4] == [3, 0, 0]).all() and (schedule[4:] == 1).all()
    assert loader.mix_weights() == {"a": 1.0, "b": 0.0, "c": 0.0}


def test_the_loader_contract_holds_weighted_and_with_a_policy():
    check_loader(lambda loaders, **kw: MixupLoader(loaders, weighting="uniform", **kw))
    online = {"policy": "exp3", "update_every": 2}
    check_loader(lambda loaders, **kw: MixupLoader(loaders, weighting="uniform", online=online,
                 batches_per_step=2, **kw))  # fmt: skip


def test_an_update_redraws_the_rest_of_the_epoch_from_the_new_weights(make_tasks):
    online = {"policy": "exp3", "update_every": 1}
    loader = weighted(make_tasks, weighting="uniform", online=online)
    loader.online.policy.update = lambda figures, weights: {"a": 0.0, "b": 1.0, "c": 0.0}
    it = iter(loader)
    head = [next(it) for _ in range(3)]
    loader.update_mixture({}, 3)
    schedule = loader.schedule(0)
    rest = list(it)
    assert len(schedule) == len(head) + len(rest) == 10  # 29 batches, 3 a step
    assert all(set(batch["task_ids"].tolist()) == {1} for batch in rest)  # what it yields
    assert (schedule[:3] == 1).all() and (schedule[3:-1] == [0, 3, 0]).all()
    assert (schedule[-1] == [0, 2, 0]).all()
    assert loader.mix_weights() == {"a": 0.0, "b": 1.0, "c": 0.0}


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"weighting": "uniform", "exhaust": "first"}, "loader.exhaust=first: a weighted mixup"),
        ({"weighting": "uniform", "batches_per_step": 0}, "batches_per_step: got 0; give an"),
    ],
)
def test_bad_weighted_options_are_one_line(make_tasks, options, says):
    with pytest.raises(MtlError) as err:
        weighted(make_tasks, **options)
    assert says in str(err.value)


def test_an_option_of_the_weighted_mixup_alone_weighs_from_proportional(make_tasks):
    loader = weighted(make_tasks, online={"policy": "exp3", "update_every": 1})
    assert loader.options()["weighting"] == "proportional"
    assert loader.schedule(0).sum(axis=0).tolist() == [20, 6, 3]  # every batch once


def test_an_unweighted_mixups_options_are_as_before(make_tasks):
    """Checkpoints of a mixup saved before weights existed resume: same options and schedule."""
    loader = weighted(make_tasks)
    assert loader.options() == {"loader": "MixupLoader", "seed": 0, "exhaust": "cycle_to_longest",
                                "steps_per_epoch": None, "pad_token_id": 0}  # fmt: skip
    assert loader.schedule(0).dtype == bool


class Alternate:
    """A policy of one's own: these weights, in turn."""

    def __init__(self):
        self.calls = 0

    def update(self, figures, weights):
        self.calls += 1
        return [{"a": 1.0, "b": 0.0, "c": 1.0}, {"a": 0.0, "b": 1.0, "c": 3.0}][self.calls % 2]

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state):
        self.calls = state["calls"]


def drive(loader: MixupLoader, keys: list, every: int, steps: int) -> None:
    """Up to `steps` batch keys (over epochs), the policy updated after every `every`-th step."""
    while len(keys) < steps:
        for batch in loader:
            keys.append(batch_key(batch))
            if loader.position[1] % every == 0:
                loader.update_mixture({}, len(keys))
            if len(keys) == steps:
                return


@pytest.mark.parametrize("every", [1, 3])
def test_resumed_at_any_step_with_a_policy_it_yields_what_the_uninterrupted_one_does(
    make_tasks, every
):
    def make() -> MixupLoader:
        online = {"policy": Alternate(), "update_every": every}
        tasks = make_tasks({"a": 18, "b": 14, "c": 10})
        return MixupLoader(tasks, seed=3, online=online, batches_per_step=2)

    full: list = []
    drive(make(), full, every, 2 * len(make()) + 3)
    assert len({key[0] for key in full}) > 3  # the steps' tasks moved with the weights
    for k in range(1, len(full)):
        head: list = []
        part = make()
        drive(part, head, every, k)
        resumed = make()
        resumed.load_state_dict(part.state_dict())
        drive(resumed, head, every, len(full))
        assert head == full, f"resumed after step {k}"
