"""Online mixing (`loader.online`): the policies' updates against hand-computed cases, the loader
redrawing the rest of an epoch from new weights, exact resume, caps and refusals."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from mtl.errors import MtlError
from mtl.loaders import RandomLoader
from mtl.loaders.online import checked_weights
from mtl.loaders.policies import DevGap, Exp3, LossSoftmax
from mtl.testing import check_loader


def softmax(*scores: float) -> list[float]:
    e = [math.exp(s) for s in scores]
    return [x / sum(e) for x in e]


def test_exp3_update_by_hand():
    policy = Exp3(exploration=0.1, smoothing=0.5)
    w = policy.update({"a": {"loss": 2.0}, "b": {"loss": 1.0}}, {"a": 0.5, "b": 0.5})
    # R_a = 0.5 * 0 + 0.5 * 2.0 / 0.5 = 2; R_b = 0.5 * 1.0 / 0.5 = 1
    soft = softmax(0.1 * 2, 0.1 * 1)
    assert [w["a"], w["b"]] == pytest.approx([0.8 * soft[0] + 0.1, 0.8 * soft[1] + 0.1])
    # b had no rows: its reward stays; a's is smoothed with its new importance-weighted loss
    w2 = policy.update({"a": {"loss": 1.0}, "b": {"rows": 0}}, w)
    r_a = 0.5 * 2 + 0.5 * 1.0 / w["a"]
    soft = softmax(0.1 * r_a, 0.1 * 1)
    assert [w2["a"], w2["b"]] == pytest.approx([0.8 * soft[0] + 0.1, 0.8 * soft[1] + 0.1])
    assert policy.state_dict() == {"rewards": pytest.approx({"a": r_a, "b": 1.0}), "updates": 2}


def test_exp3_explores_by_the_decaying_rate_when_none_is_given():
    names = {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}
    policy = Exp3()
    first = policy.update({"a": {"loss": 9.0}}, names)  # eps_1 = min(1/3, sqrt(ln 3 / 3)) = 1/3
    assert list(first.values()) == pytest.approx([1 / 3] * 3)
    for _ in range(2):
        assert list(policy.update({"a": {"loss": 9.0}}, first).values()) == pytest.approx(
            [1 / 3] * 3
        )  # updates 2, 3: sqrt(ln 3 / (3 t)) is still above 1/3
    fourth = policy.update({"a": {"loss": 9.0}}, first)
    eps = math.sqrt(math.log(3) / (3 * 4))  # update 4: below 1/3
    reward = 0.0
    for _ in range(4):  # smoothing 0.9, loss 9 drawn with weight 1/3 each time
        reward = 0.9 * reward + 0.1 * 9.0 / (1 / 3)
    soft = softmax(eps * reward, 0.0, 0.0)
    assert list(fourth.values()) == pytest.approx([(1 - 3 * eps) * p + eps for p in soft])


def test_loss_softmax_update_by_hand():
    policy = LossSoftmax(temperature=0.5)
    w = policy.update({"a": {"loss": 1.0}, "b": {"loss": 2.0}}, {"a": 0.5, "b": 0.5})
    assert [w["a"], w["b"]] == pytest.approx(softmax(2.0, 4.0))
    w = policy.update({"a": {"loss": 3.0}}, w)  # b keeps its latest loss
    assert [w["a"], w["b"]] == pytest.approx(softmax(6.0, 4.0))


@pytest.mark.parametrize("policy", [Exp3, LossSoftmax])
def test_normalize_first_reads_each_loss_over_its_first_window(policy):
    # A generation task's loss (about 7) beside a classification's (about 1.4): as they are,
    # the larger wins; over each task's first window's, the one that came down less does.
    weights = {"gen": 0.5, "cls": 0.5}
    plain, scaled = policy(), policy(normalize="first")
    for p in (plain, scaled):
        p.update({"gen": {"loss": 7.0}, "cls": {"loss": 1.4}}, weights)
    later = {"gen": {"loss": 3.5}, "cls": {"loss": 1.26}}  # gen halved, cls down 10%
    assert plain.update(later, weights)["gen"] > 0.5
    w = scaled.update(later, weights)
    assert w["cls"] > 0.5
    assert scaled.state_dict()["first"] == {"gen": 7.0, "cls": 1.4}
    if policy is LossSoftmax:  # ~ exp(0.5) vs exp(0.9): the scaled losses by hand
        assert [w["gen"], w["cls"]] == pytest.approx(softmax(0.5, 0.9))
    resumed = policy(normalize="first")  # the first windows come back from the checkpoint
    resumed.load_state_dict(scaled.state_dict())
    again = {"gen": {"loss": 3.0}, "cls": {"loss": 1.2}}
    assert resumed.update(again, w) == scaled.update(again, w)


def test_an_unknown_normalize_is_one_line():
    with pytest.raises(MtlError, match=r"normalize='dev'; use one of none, first"):
        Exp3(normalize="dev")


def test_dev_gap_by_hand():
    policy = DevGap(target={"a": 0.9}, floor=0.1)
    same = {"a": 0.5, "b": 0.5}
    assert policy.update({"a": {"loss": 1.0}}, same) == same  # no evaluation yet
    w = policy.update({"a": {"dev": 0.6}, "b": {"dev": 0.4}}, same)
    # a: target 0.9 - 0.6 = 0.3; b: its best so far (0.4) - 0.4 = 0
    assert [w["a"], w["b"]] == pytest.approx([0.4 / 0.5, 0.1 / 0.5])
    w = policy.update({"a": {"dev": 0.9}, "b": {"dev": 0.3}}, w)  # b fell 0.1 below its best
    assert [w["a"], w["b"]] == pytest.approx([0.1 / 0.3, 0.2 / 0.3])
    resumed = DevGap(target={"a": 0.9}, floor=0.1)
    resumed.load_state_dict(policy.state_dict())  # the best figures and the logged gaps
    assert resumed.shown() == policy.shown() == pytest.approx({"a": 0.0, "b": 0.1})
    with pytest.raises(MtlError, match="names 'c', not a task of this run"):
        DevGap(target={"c": 1.0}).check_tasks(["a", "b"])


@pytest.mark.parametrize(
    ("weights", "says"),
    [
        ({"a": -0.1, "b": 1.0}, "returned weight -0.1 for task 'a'"),
        ({"a": math.nan, "b": 1.0}, "returned weight nan for task 'a'"),
        ({"a": 0.0, "b": 0.0}, "returned weight 0 for every task"),
        ({"a": 1.0}, "return {task: weight} for ['a', 'b']"),
    ],
)
def test_a_bad_weight_is_one_line_naming_the_policy_and_step(weights, says):
    with pytest.raises(MtlError, match="policy Exp3 at step 40") as err:
        checked_weights(weights, ["a", "b"], 40, Exp3())
    assert says in str(err.value)


class Fixed:
    """A policy of one's own: the weights it was given, in turn."""

    def __init__(self, *weights: dict):
        self.weights, self.calls = list(weights), 0

    def update(self, figures, weights):
        self.calls += 1
        return self.weights[(self.calls - 1) % len(self.weights)]

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state):
        self.calls = state["calls"]


ALTERNATE = ({"a": 1.0, "b": 0.0, "c": 1.0}, {"a": 0.0, "b": 1.0, "c": 3.0})


def online_loader(policy=None, **options) -> RandomLoader:
    tasks = {"a": range(9), "b": range(7), "c": range(5)}
    online = {"policy": policy or Fixed(*ALTERNATE), "update_every": 1}
    return RandomLoader(tasks, seed=3, online=online, **options)


def drive(loader: RandomLoader, every: int, steps: int | None = None) -> list[tuple[int, int]]:
    """(epoch, task index) of each step, the policy updated after every `every`-th step."""
    out = []
    for _ in range(2):
        epoch = loader.epoch
        for step, batch in enumerate(loader, start=loader.position[1] - 0):
            out.append((epoch, loader.names.index(loader.tasks_at(epoch, step)[0]), batch))
            if loader.position[1] % every == 0:
                loader.update_mixture({}, len(out))
            if steps is not None and len(out) == steps:
                return out
    return out


def test_an_update_redraws_the_rest_of_the_epoch_from_the_new_weights():
    loader = online_loader(policy=Fixed({"a": 0.0, "b": 1.0, "c": 0.0}))
    assert len(loader) == 21
    it = iter(loader)
    head = [next(it) for _ in range(5)]
    assert len(head) == 5
    loader.update_mixture({}, 5)
    schedule = loader.schedule(0)
    assert len(schedule) == 21  # len() stays exact
    assert (schedule[5:] == loader.names.index("b")).all()  # b only, past its pass
    assert len(list(it)) == 16
    assert loader.mix_weights() == {"a": 0.0, "b": 1.0, "c": 0.0}


def test_a_capped_task_gets_no_more_than_its_cap_whatever_the_policy_says():
    loader = online_loader(policy=Fixed({"a": 0.0, "b": 1.0, "c": 0.0}), max_passes={"b": 1})
    it = iter(loader)
    next(it)
    loader.update_mixture({}, 1)
    counts = np.bincount(loader.schedule(0), minlength=3)
    assert counts[1] == 7  # b's one pass; the rest goes to the tasks in play
    assert counts.sum() == 21


@pytest.mark.parametrize("every", [1, 3, 8])
def test_resumed_at_any_step_the_loader_draws_what_the_uninterrupted_one_does(every):
    full = drive(online_loader(), every)
    for k in range(1, len(full)):
        part = online_loader()
        head = drive(part, every, steps=k)
        state = part.state_dict()
        resumed = online_loader()
        resumed.load_state_dict(state)
        rest = []
        for _ in range(2):
            epoch = resumed.epoch
            start = resumed.position[1]
            for step, batch in enumerate(resumed, start=start):
                rest.append((epoch, resumed.names.index(resumed.tasks_at(epoch, step)[0]), batch))
                if resumed.position[1] % every == 0:
                    resumed.update_mixture({}, k + len(rest))
            if len(head) + len(rest) >= len(full):
                break
        assert head + rest[: len(full) - k] == full, f"resumed after step {k}"


def test_the_loader_contract_holds_with_a_policy():
    check_loader(lambda loaders, **kw: RandomLoader(loaders, online={"policy": "exp3",
                 "update_every": 2}, **kw))  # fmt: skip


def test_a_policy_of_ones_own_by_its_dotted_path(tmp_path, monkeypatch):
    (tmp_path / "my_policies.py").write_text(
        "class Favour:\n"
        "    def __init__(self, task):\n"
        "        self.task = task\n"
        "    def update(self, figures, weights):\n"
        "        return {n: float(n == self.task) for n in weights}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    online = {"policy": "my_policies.Favour", "update_every": 1, "options": {"task": "c"}}
    loader = RandomLoader({"a": range(4), "c": range(4)}, online=online)
    it = iter(loader)
    next(it)
    loader.update_mixture({}, 1)
    assert (loader.schedule(0)[1:] == 1).all()
    sys.modules.pop("my_policies", None)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"online": {"policy": "exp3", "update_every": 0}}, "update_every: got 0"),
        (
            {"online": {"policy": "exp4", "update_every": 1}},
            "policy='exp4' is not a policy; did you mean exp3?",
        ),
        (
            {"online": {"policy": "exp3", "update_every": 1, "options": {"exploration": -1}}},
            "exploration: got -1",
        ),  # fmt: skip
        ({"online": {"policy": "exp3", "update_every": 1, "every": 2}}, "unknown key(s) every"),
        (
            {"online": {"policy": "exp3", "update_every": 1}, "exhaust": "first"},
            "needs epochs of a fixed number of steps",
        ),  # fmt: skip
        (
            {"online": {"policy": "dev_gap", "update_every": 1, "options": {"target": {"z": 1}}}},
            "names 'z', not a task of this run",
        ),  # fmt: skip
    ],
)
def test_bad_online_options_are_one_line(options, says):
    with pytest.raises(MtlError) as err:
        RandomLoader({"a": range(4), "b": range(3)}, **options)
    assert says in str(err.value)


def test_a_static_loaders_state_is_as_before_online_mixing_existed():
    """Checkpoints saved before `loader.online` hold loader options without it: a static
    loader's options and state keep that shape, so those checkpoints still resume (their
    per-task `stats`, no longer kept, are passed over)."""
    loader = RandomLoader({"a": range(4), "b": range(3)}, seed=2)
    state = loader.state_dict()
    assert set(state) == {"options", "epoch", "step", "tasks"}
    older = {**state, "step": 2, "stats": {"a": {"batches": 1, "examples": 1, "tokens": 1}}}
    loader.load_state_dict(older)
    assert loader.state_dict() == {**state, "step": 2}
    assert set(state["options"]) == {
        "loader", "seed", "exhaust", "steps_per_epoch", "weighting", "temperature",
        "temperature_end", "shape", "size_cap", "stages", "max_passes",
    }  # fmt: skip


class Huge:
    """A policy whose weights are each near the float maximum (their sum overflows)."""

    def update(self, figures, weights):
        return {n: 1e308 for n in weights}


class Raises:
    def update(self, figures, weights):
        raise KeyError("dev")


class NoUpdate:
    pass


def _policy_loader(policy, **options):
    online = {"policy": f"{__name__}.{policy}", "update_every": 1}
    return RandomLoader({"a": range(6), "b": range(6), "c": range(6)}, online=online, **options)


def test_weights_near_the_float_maximum_are_weights_not_an_overflow():
    loader = _policy_loader("Huge")
    next(iter(loader))
    loader.update_mixture({}, 1)
    assert loader.mix_weights() == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})


def test_a_task_weighted_0_stays_out_under_online_mixing():
    """exp3 explores every task it is given; a weight 0 in the weighting still leaves one out."""
    online = {"policy": "exp3", "update_every": 1, "options": {"exploration": 0.2}}
    loader = RandomLoader(
        {"a": range(6), "b": range(6), "c": range(6)},
        online=online,
        weighting={"a": 1, "b": 1, "c": 0},
        steps_per_epoch=12,
    )
    it = iter(loader)
    for step in range(1, 12):
        next(it)
        loader.update_mixture({"a": {"loss": 1.0}, "b": {"loss": 2.0}}, step)
        assert loader.mix_weights()["c"] == 0
    assert 2 not in loader.schedule(0).tolist()


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ("NoUpdate", "NoUpdate has no update(figures, weights) method"),
        ("softmax", "is a function, not a subclass of builtins.object"),
    ],
)
def test_a_policy_that_is_not_one_is_one_line_at_build(policy, says):
    with pytest.raises(MtlError) as err:
        _policy_loader(policy)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_policy_that_raises_is_one_line_naming_it_and_where():
    loader = _policy_loader("Raises")
    next(iter(loader))
    with pytest.raises(MtlError) as err:
        loader.update_mixture({}, 3)
    message = str(err.value)
    assert message.startswith("loader.online.policy Raises.update raised at step 3 (KeyError: ")
    assert f"{__file__}:" in message and message.endswith("; fix the policy")


def test_exploration_above_one_over_k_is_refused_when_built():
    online = {"policy": "exp3", "update_every": 1, "options": {"exploration": 0.5}}
    with pytest.raises(MtlError, match=r"exploration: got 0.5; with 3 tasks give a number in"):
        RandomLoader({"a": range(4), "b": range(4), "c": range(4)}, online=online)


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda s: s.update(weights=[-1.0, 1.0, 1.0]), "the weights are [-1.0, 1.0, 1.0]"),
        (lambda s: s.update(weights=[math.nan, 0.5, 0.5]), "the weights are [nan, 0.5, 0.5]"),
        (lambda s: s.update(weights=[0.5, 0.5]), "not 3 numbers >= 0 summing to 1"),
        (lambda s: s["plan"]["updates"].append([10**6, 99, [1 / 3] * 3]), "at slot 1000000"),
        (lambda s: s.update(plan="x"), "the plan is 'x'"),
        (lambda s: s["policy"]["rewards"].update(a=math.nan), "rewards for task 'a' is nan"),
        (lambda s: s.update(updates=-1), "updates is -1"),
    ],
)
def test_a_saved_state_out_of_range_is_refused_naming_it(edit, says):
    from mtl.errors import BadState

    loader = online_loader("exp3")
    drive(loader, 2, steps=5)
    state = loader.state_dict()
    edit(state["online"])
    fresh = online_loader("exp3")
    with pytest.raises(BadState) as err:
        fresh.load_state_dict(state)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_exp3_keeps_the_configured_mixture_as_its_prior():
    """w_i = (1 - K eps) p_i exp(eps R_i) / sum_j p_j exp(eps R_j) + K eps p_i: equal rewards
    give the prior back, and exploration mixes toward it, not toward uniform."""
    policy = Exp3(exploration=0.1, smoothing=0.5)
    policy.use_prior({"a": 9.0, "b": 1.0})
    w = policy.update({}, {"a": 0.9, "b": 0.1})  # no losses yet: rewards equal (0)
    assert [w["a"], w["b"]] == pytest.approx([0.9, 0.1])
    w2 = policy.update({"a": {"loss": 2.0}, "b": {"loss": 1.0}}, w)
    r_a, r_b = 0.5 * 2.0 / 0.9, 0.5 * 1.0 / 0.1
    e_a, e_b = 0.9 * math.exp(0.1 * r_a), 0.1 * math.exp(0.1 * r_b)
    want = [0.8 * e_a / (e_a + e_b) + 0.2 * 0.9, 0.8 * e_b / (e_a + e_b) + 0.2 * 0.1]
    assert [w2["a"], w2["b"]] == pytest.approx(want)


def test_loss_softmax_and_dev_gap_scale_the_configured_weights():
    soft = LossSoftmax(temperature=0.5)
    soft.use_prior({"a": 0.75, "b": 0.25})
    w = soft.update({"a": {"loss": 1.0}, "b": {"loss": 2.0}}, {"a": 0.75, "b": 0.25})
    e_a, e_b = 0.75 * math.exp(2.0), 0.25 * math.exp(4.0)
    assert [w["a"], w["b"]] == pytest.approx([e_a / (e_a + e_b), e_b / (e_a + e_b)])
    gap = DevGap(target={"a": 0.9, "b": 0.9}, floor=0.1)
    gap.use_prior({"a": 0.75, "b": 0.25})
    w = gap.update({"a": {"dev": 0.5}, "b": {"dev": 0.7}}, {"a": 0.75, "b": 0.25})
    u_a, u_b = 0.75 * (0.4 + 0.1), 0.25 * (0.2 + 0.1)
    assert [w["a"], w["b"]] == pytest.approx([u_a / (u_a + u_b), u_b / (u_a + u_b)])


@pytest.mark.parametrize(
    "weighting", [{"a": 9, "b": 1}, "temperature"], ids=["as given", "temperature"]
)
def test_the_run_starts_from_the_configured_mixture_and_the_policy_keeps_it(weighting):
    """loader.weighting's weights start the run, and an update on equal figures keeps them
    (before, exp3's first update went to 0.5 / 0.5 and stayed there)."""
    online = {"policy": "exp3", "update_every": 1, "options": {"exploration": 0.2}}
    tasks = {"a": range(40), "b": range(5)}
    loader = RandomLoader(tasks, online=online, weighting=weighting, steps_per_epoch=20)
    start = loader.mix_weights()
    assert start["a"] > 0.7  # 0.9, or 40^(1/2) : 5^(1/2)
    it = iter(loader)
    next(it)
    loader.update_mixture({}, 1)  # no losses: nothing to move the weights
    assert loader.mix_weights() == pytest.approx(start)
