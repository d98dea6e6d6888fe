"""Online mixing: task weights that follow what training measures (`loader.online`): the
policy a run names (`build_policy`), its outputs checked (`checked_weights`), and
`OnlineMixing`, the part of a weighted loader that redraws the rest of an epoch from them.

Every `update_every` optimizer steps the training loop hands the policy the figures of the steps
since its last update, summed over the processes so that every rank sees the same numbers:
`{task: {"loss": mean training loss, "rows": rows, "dev": the latest evaluation's main dev
figure, higher is better}}` ("loss" only for a task that had rows, "dev" once there is an
evaluation). The policy returns the next weights; the loader draws the rest of the epoch from
them (`RandomLoader`), so `len()` stays exact and a capped task still gets no more than its cap.

A policy is any object with `update(figures, weights) -> {task: weight}` (`weights`: the ones
in force, normalised); `use_prior(prior)` where it takes the configured mixture as its prior
(`prior`: the weighting's weights, normalised; called once, before the first update);
`state_dict()`/`load_state_dict()` where it keeps state, which the checkpoint holds;
`shown() -> {task: number}` where it has a figure per task to log (`mix_policy/<task>`);
`reads_dev = True` where it reads "dev" (the run must then evaluate during training).

The built-in policies and their formulas: `mtl.loaders.policies`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mtl.errors import MtlError, did_you_mean, import_target
from mtl.loaders.mixture import fill
from mtl.loaders.online_state import checked_state
from mtl.loaders.policies import POLICIES
from mtl.values import is_int, is_number

if TYPE_CHECKING:  # for the annotation only: the loader imports this module
    from mtl.loaders.weighted import WeightedLoader


def build_policy(policy: Any, options: Mapping[str, Any] | None = None) -> Any:
    """A policy from a built-in name (with `options`), a dotted path to a class of your own
    (`package.module.Class`, built with `options`), or an object with `update` as is."""
    if not isinstance(policy, str):
        if not callable(getattr(policy, "update", None)):
            raise MtlError(
                f"loader.online.policy: {type(policy).__name__} has no update(figures, weights); "
                f"use one of {', '.join(POLICIES)} or a class of your own"
            )
        return policy
    options = dict(options or {})
    if policy in POLICIES:
        cls = POLICIES[policy]
    elif "." not in policy:
        raise MtlError(
            f"loader.online.policy={policy!r} is not a policy; {did_you_mean(policy, POLICIES)}"
            f"use one of {', '.join(POLICIES)} or package.module.Class of your own"
        )
    else:
        cls = import_target(policy, "loader.online.policy", object)  # a class, not a function
        if not callable(getattr(cls, "update", None)):
            raise MtlError(
                f"loader.online.policy={policy!r}: {cls.__name__} has no update(figures, "
                "weights) method; give it one (see mtl/loaders/policies.py)"
            )
    try:
        return cls(**options)
    except TypeError as err:
        raise MtlError(f"loader.online: {policy} does not take these options: {err}") from None


def checked_weights(weights: Any, names: Sequence[str], step: int, policy: Any) -> np.ndarray:
    """The policy's weights as an array in `names` order, normalised; one line naming the
    policy, the task and the step if any is missing, negative, NaN, or all are 0."""
    who = f"loader.online.policy {type(policy).__name__} at step {step}"
    if not isinstance(weights, Mapping) or set(weights) != set(names):
        raise MtlError(f"{who} returned {weights!r}; return {{task: weight}} for {list(names)}")
    out = np.zeros(len(names))
    for i, name in enumerate(names):
        value = weights[name]
        try:
            out[i] = float(value) if is_number(value) else math.nan
        except OverflowError:
            out[i] = math.inf
        if not math.isfinite(out[i]) or out[i] < 0:
            raise MtlError(
                f"{who} returned weight {value!r} for task {name!r}; give a finite number >= 0"
            )
    if out.max() <= 0:
        raise MtlError(f"{who} returned weight 0 for every task; give at least one above 0")
    out = out / out.max()  # weights near the float maximum: their sum would overflow
    return out / out.sum()


class OnlineMixing:
    """`loader.online` of a WeightedLoader: {policy, update_every, options}
    (`mtl.loaders.online`).

    An epoch starts from the policy's latest weights (the mixture's `weighting` before its
    first update), split over the epoch's slots (`per_step` a step) as a static mixture's are
    and laid out by the loader's `arrange` with `rng([seed, epoch])`. An update at step s of the
    epoch redraws the slots of steps s.. from the new weights (counts by largest remainders
    within each task's cap, laid out with `rng([seed, epoch, u])`, u the run's update count),
    so `len()` is exact, every rank draws the same steps, and the epoch's plan (start weights
    and updates) resumes it exactly. The plan's steps are slots."""

    def __init__(self, loader: WeightedLoader, online: Mapping[str, Any]):
        if not isinstance(online, Mapping) or "policy" not in online:
            raise MtlError(
                f"loader.online: got {online!r}; give {{policy: exp3|loss_softmax|dev_gap|"
                "<package.module.Class>, update_every: <optimizer steps>, options: {...}}"
            )
        unknown = set(online) - {"policy", "update_every", "options"}
        if unknown:
            raise MtlError(
                f"loader.online: unknown key(s) {', '.join(sorted(map(str, unknown)))}; use "
                "policy, update_every, options"
            )
        every = online.get("update_every")
        if not is_int(every) or every < 1:
            raise MtlError(f"loader.online.update_every: got {every!r}; give an integer >= 1")
        if loader.fixed_length is None or loader.mixture.moves:
            raise MtlError(
                "loader.online needs epochs of a fixed number of steps (exhaust=each_once or "
                "steps_per_epoch) and a weighting that does not move by itself (no stages, "
                "annealed or temperature_end)"
            )
        self.loader, self.update_every = loader, int(every)
        self.name = online["policy"] if isinstance(online["policy"], str) else None
        self.policy = build_policy(online["policy"], online.get("options"))
        if callable(getattr(self.policy, "check_tasks", None)):
            self.policy.check_tasks(loader.names)
        self.weights = loader.mixture.weights(0)  # the run starts from the configured mixture
        self.included = (self.weights > 0).astype(float)  # weight 0 leaves a task out
        if callable(getattr(self.policy, "use_prior", None)):  # ... and the policy keeps it
            self.policy.use_prior(dict(zip(loader.names, self.weights.tolist(), strict=True)))
        self.updates = 0
        self.plan: dict[str, Any] = {"epoch": -1, "start": [], "updates": []}
        self.drawn: tuple | None = None  # (epoch, its steps, updates applied) under way

    def options(self) -> dict[str, Any]:
        return {"policy": self.name or type(self.policy).__name__, "every": self.update_every}

    def begin(self, epoch: int) -> None:
        """An iteration starts `epoch`: a new plan from the latest weights (kept on resume)."""
        if self.plan["epoch"] != epoch:
            self.plan = {"epoch": epoch, "start": self.weights.tolist(), "updates": []}
            self.drawn = None
            self.loader.replan(epoch)

    def update(self, figures: Mapping, step: int) -> None:
        names = self.loader.names
        current = {n: float(w) for n, w in zip(names, self.weights, strict=True)}
        try:
            new = self.policy.update(figures, current)
        except MtlError:
            raise
        except Exception as err:  # the user's policy: one line naming it and where it raised
            raise MtlError(
                f"loader.online.policy {type(self.policy).__name__}.update raised at step {step} "
                f"({type(err).__name__}: {err}{_where(err)}); fix the policy"
            ) from None
        weights = checked_weights(new, names, step, self.policy) * self.included
        if weights.sum() <= 0:
            raise MtlError(
                f"loader.online.policy {type(self.policy).__name__} at step {step} gave weight "
                "only to tasks the weighting leaves out (weight 0); give the others some"
            )
        self.weights = weights / weights.sum()
        self.updates += 1
        epoch, at = self.loader.position
        if self.plan["epoch"] == epoch and 0 < at < self.loader.fixed_length:
            event = [at * self.loader.per_step, self.updates, self.weights.tolist()]
            self.plan["updates"].append(event)
            if self.drawn is not None and self.drawn[0] == epoch:  # redraw the rest in place
                self.redraw(self.drawn[1], *event, epoch)
                self.drawn = (epoch, self.drawn[1], len(self.plan["updates"]))
            self.loader.replan(epoch)

    def schedule(self, epoch: int) -> np.ndarray:
        """The epoch's slots: from the plan's start weights, then each update's redraw of the
        rest (kept for the epoch under way, so that an update costs one redraw)."""
        planned = self.plan["epoch"] == epoch
        if (
            planned
            and self.drawn is not None
            and self.drawn[::2] == (epoch, len(self.plan["updates"]))
        ):
            return self.drawn[1]
        length = self.loader.slots
        start = np.array(self.plan["start"]) if planned else self.weights
        counts = self.spread(length, start, self.room(), epoch)
        order = self.loader.arrange(counts, self.loader.rng(epoch))
        if not planned:
            return order
        for event in self.plan["updates"]:
            self.redraw(order, *event, epoch)
        self.drawn = (epoch, order, len(self.plan["updates"]))
        return order

    def room(self) -> np.ndarray:
        caps = self.loader.mixture.caps
        return np.full(len(self.loader.names), np.inf) if caps is None else caps.astype(float)

    def redraw(self, order: np.ndarray, at: int, index: int, weights: list, epoch: int) -> None:
        """Slots `at`.. of `order` drawn again from `weights` (rng of seed, epoch, `index`)."""
        left = self.room() - np.bincount(order[:at], minlength=len(self.loader.names))
        counts = self.spread(len(order) - at, np.array(weights), left, epoch)
        rng = np.random.default_rng([self.loader.seed, epoch, index])
        order[at:] = self.loader.arrange(counts, rng)

    def spread(self, steps: int, p: np.ndarray, room: np.ndarray, epoch: int) -> np.ndarray:
        """`steps` (slots) split by the policy's weights `p` within each task's `room`; once the
        tasks it weighs are all at their caps, the rest by the mixture's own weights over the
        others (a capped task gets no more, whatever the policy says)."""
        weighed = p > 0
        capacity = room[weighed].sum()
        if steps <= capacity:
            return fill(steps, p, room, epoch)
        counts = np.where(weighed, room, 0).astype(np.int64)
        rest = np.where(weighed, 0.0, self.loader.mixture.weights(epoch))
        return counts + fill(steps - int(counts.sum()), rest, room - counts, epoch)

    def state_dict(self) -> dict[str, Any]:
        state = getattr(self.policy, "state_dict", dict)()
        return {
            "weights": self.weights.tolist(),
            "updates": self.updates,
            "plan": self.plan,
            "policy": state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The state `state_dict` saved, checked first (`checked_state`: `BadState` naming
        what is wrong)."""
        weights, updates, plan = checked_state(state, len(self.loader.names), self.loader.slots)
        if callable(getattr(self.policy, "load_state_dict", None)):
            self.policy.load_state_dict(state.get("policy"))
        self.weights, self.updates, self.plan = weights, updates, plan
        self.drawn = None
        self.loader.replan(self.plan["epoch"])


def _where(err: BaseException) -> str:
    """`, at file:line` of the innermost frame of `err`'s traceback ('' without one)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f", at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else ""
