"""RandomLoader: the task of every step drawn at random, with a choice of task weights."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from mtl.errors import MtlError
from mtl.loaders.base import CompositeLoader
from mtl.loaders.mixture import Mixture, fill
from mtl.loaders.online import build_policy, checked_weights
from mtl.loaders.online_state import checked_state


class WeightedLoader(CompositeLoader):
    """What a loader that mixes by task weights shares (`RandomLoader`, and `MixupLoader` given
    a weighting): its `mixture` (None: it mixes without weights), `loader.online`, their
    options, the logged weights and the state a resume needs.

    Its epochs of a fixed number of steps (`fixed_length`) are planned in slots, `per_step`
    task batches a step (1 for a RandomLoader): each stretch of steps with one mixture has its
    slots split by the weights (`Mixture.counts`), laid out by `arrange` and read by step by
    `by_step`."""

    per_step = 1
    mixture: Mixture | None = None
    online: OnlineMixing | None = None

    @property
    def fixed_length(self) -> int | None:
        """Steps of every epoch where that is fixed, else None."""
        raise NotImplementedError

    @property
    def slots(self) -> int:
        """Task batches in an epoch of `fixed_length` steps."""
        return self.fixed_length * self.per_step

    def arrange(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Slots holding `counts[t]` batches of each task t, in the order they are taken."""
        return rng.permutation(np.repeat(np.arange(len(self.names)), counts))

    def by_step(self, slots: np.ndarray) -> np.ndarray:
        """The schedule of the slots (`per_step` a step)."""
        return slots

    def planned(self, epoch: int) -> np.ndarray:
        """The schedule of a fixed-length epoch: static, or from the online policy's plan."""
        if self.online is not None:
            return self.by_step(self.online.schedule(epoch))
        rng, length = self.rng(epoch), self.fixed_length
        counts = self.mixture.counts(length, epoch, self.per_step, self.slots)
        return self.by_step(np.concatenate([self.arrange(c, rng) for c in counts]))

    def options(self) -> dict[str, Any]:
        options = super().options()
        if self.mixture is not None:
            options.update(self.mixture.options())
        if self.online is not None:  # absent otherwise: older checkpoints resume as they were
            options["online"] = self.online.options()
        return options

    def mix_weights(self) -> dict[str, float]:
        """The weights of the step last drawn (of the first step before any); with
        `online`, the policy's latest weights (those the next steps are drawn from)."""
        if self.online is not None:
            return {n: float(w) for n, w in zip(self.names, self.online.weights, strict=True)}
        if self.mixture is None:
            return super().mix_weights()
        epoch, step = self.position
        if step == 0 and epoch > 0:  # an epoch just ended: its last step
            epoch, step = epoch - 1, self.epoch_length(epoch - 1)
        p = self.mixture.weights(epoch, max(step - 1, 0), self.fixed_length)
        return {n: float(w) for n, w in zip(self.names, p, strict=True)}

    def __iter__(self):
        if self.online is not None:
            self.online.begin(self._epoch)
        return super().__iter__()

    def update_mixture(self, figures: Mapping, step: int) -> None:
        """`loader.online`: the policy's next weights from `figures` (the same on every rank),
        and the rest of the epoch redrawn from them."""
        if self.online is None:
            raise MtlError("update_mixture: this loader has no loader.online policy")
        self.online.update(figures, step)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.online is not None:
            state["online"] = self.online.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.online is not None:
            if "online" not in state:
                raise MtlError("loader state: saved without loader.online; resume without it")
            self.online.load_state_dict(state["online"])
        super().load_state_dict(state)


class RandomLoader(WeightedLoader):
    """Each step takes one batch of a randomly drawn task, with task weights that set the shares
    and may move over the run (`mtl.loaders.mixture`: proportional, uniform, temperature, a
    temperature schedule, annealed, `{task: weight}`, stages, caps).

    One epoch:

    - `exhaust="each_once"` (default): `sum(n_t)` steps (`n_t`: batches per pass of task t; tasks
      whose weight is always 0 left out). The steps are split by the weights exactly (largest
      remainders), so the planned shares are the weights within the rounding of one epoch, and
      drawn in random order. With proportional weights that is every batch of every task once; a
      task given more steps than it has batches starts a new pass (fresh shuffle), one given
      fewer leaves the rest of its pass (the next epoch starts a new one).
    - `steps_per_epoch=N`: N steps split by the weights alike; tasks restart a pass whenever they
      run out and continue across epochs.
    - `exhaust="first"`: draws with the weights renormalised over the tasks not yet used up; the
      epoch ends with the batch that uses up the first task.
    - `exhaust="cycle_to_longest"`: independent draws with the weights; a task that runs out
      starts a new pass; the epoch ends once the longest task (weight > 0) has given `n_t`
      batches.

    Weights that move change by epoch (annealed, `temperature_end`) under every policy; `stages`
    switch at a loader step under the fixed-length epochs (each_once, steps_per_epoch);
    `max_passes` caps a task's passes per epoch under those and cycle_to_longest (a capped task
    is drawn no more once it reaches its cap). `epochs` (the run's; training gives
    `trainer.epochs`) is needed by what moves. `online` ({policy, update_every, options}:
    `mtl.loaders.online`, `OnlineMixing` below): a policy's weights, redrawn during the epoch.

    Random: the task sequence of epoch e is drawn up front from `np.random.default_rng([seed,
    e])`, so `len()` is exact and every process draws the same sequence. Batch order within a
    task comes from that task's sampler, which gets `set_epoch(pass)` for every new pass.
    """

    def __init__(
        self,
        loaders: Mapping[str, Iterable],
        *,
        seed: int = 0,
        weighting: str | Mapping[str, float] = "proportional",
        temperature: float = 2.0,
        temperature_end: float | None = None,
        shape: str = "linear",
        size_cap: int | None = None,
        stages: list | None = None,
        max_passes: float | Mapping[str, float] | None = None,
        exhaust: str | None = None,
        steps_per_epoch: int | None = None,
        epochs: int | None = None,
        online: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(loaders, seed=seed, exhaust=exhaust, steps_per_epoch=steps_per_epoch)
        if size_cap is not None and (
            not isinstance(size_cap, (int, np.integer))
            or isinstance(size_cap, bool)
            or size_cap < 1
        ):
            raise MtlError(f"size_cap: got {size_cap!r}; use an integer >= 1 or null (no cap)")
        self.mixture = Mixture(
            self.names, self.sizes, weighting=weighting, temperature=temperature,
            temperature_end=temperature_end, shape=shape,
            size_cap=None if size_cap is None else int(size_cap), stages=stages,
            max_passes=max_passes, epochs=epochs,
        )  # fmt: skip
        if stages and self.fixed_length is None:
            raise MtlError(
                f"loader.stages need epochs of a fixed number of steps (exhaust=each_once or "
                f"steps_per_epoch), not exhaust={self.exhaust}"
            )
        if max_passes is not None and self.exhaust == "first":
            raise MtlError(
                "loader.max_passes: under exhaust=first no task makes a second pass; use "
                "each_once, cycle_to_longest or steps_per_epoch"
            )
        caps = self.mixture.caps
        if caps is not None and self.exhaust == "cycle_to_longest" and self.steps_per_epoch is None:
            longest = int(np.argmax(self.sizes * self.mixture.in_play()))
            if caps[longest] < self.sizes[longest]:
                raise MtlError(
                    f"loader.max_passes: task {self.names[longest]!r} ends each epoch after one "
                    "pass (exhaust=cycle_to_longest); give it at least 1"
                )
        self.mixture.boundaries(self.fixed_length if stages else None)  # one line if bad
        self.online = None if online is None else OnlineMixing(self, online)

    @property
    def fixed_length(self) -> int | None:
        """Steps of every epoch where that is fixed (each_once, steps_per_epoch), else None."""
        if self.steps_per_epoch is not None:
            return self.steps_per_epoch
        if self.exhaust == "each_once":
            return int(self.sizes[self.mixture.in_play()].sum())
        return None

    def build_schedule(self, epoch: int) -> np.ndarray:
        if self.fixed_length is not None:
            return self.planned(epoch)
        rng = self.rng(epoch)
        weights = self.mixture.stage_weights(self.mixture.base, epoch)
        p = weights / weights.sum()
        if self.exhaust == "cycle_to_longest":
            longest = int(np.argmax(self.sizes * (p > 0)))
            if self.mixture.caps is None:
                return _draw_until_count(rng, p, longest, int(self.sizes[longest]))
            return _draw_capped(rng, p, longest, int(self.sizes[longest]), self.mixture.caps)
        if self.mixture.base["weighting"] == "proportional":  # p_t ~ batches left: a shuffle
            order = rng.permutation(np.repeat(np.arange(len(p)), self.sizes))
            ends = [np.flatnonzero(order == t)[-1] for t in range(len(p))]
            return order[: min(ends) + 1]
        return _draw_until_first_out(rng, self.sizes, weights)


def _draw_until_first_out(
    rng: np.random.Generator, sizes: np.ndarray, weights: np.ndarray
) -> np.ndarray:
    """Draw tasks with `weights` until the first of them is used up (its `sizes` batches drawn).
    Tasks with weight 0 are never drawn. Vectorised: draw enough steps that one task surely runs
    out (pigeonhole), and keep the draws up to the first that does."""
    remaining = np.where(weights > 0, sizes, 0)
    active = np.flatnonzero(remaining)
    n_draws = int(remaining.sum()) - len(active) + 1
    p = weights[active] / weights[active].sum()
    draws = active[rng.choice(len(active), size=n_draws, p=p)]
    out_at = min(
        hits[remaining[t] - 1]
        for t in active
        if len(hits := np.flatnonzero(draws == t)) >= remaining[t]
    )
    return draws[: out_at + 1]


def _draw_capped(
    rng: np.random.Generator, p: np.ndarray, task: int, count: int, caps: np.ndarray
) -> np.ndarray:
    """As `_draw_until_count`, but a task that reaches its cap (batches this epoch) is drawn no
    more: the draws stop before its first one past the cap and go on without it."""
    p, taken, parts = p.copy(), np.zeros(len(p), dtype=np.int64), []
    while True:
        draws = _draw_until_count(rng, p / p.sum(), task, count - int(taken[task]))
        over = [
            hits[int(caps[t] - taken[t])]
            for t in np.flatnonzero(p > 0)
            if t != task and len(hits := np.flatnonzero(draws == t)) > caps[t] - taken[t]
        ]
        if not over:
            parts.append(draws)
            return np.concatenate(parts)
        stop = min(over)
        parts.append(draws[:stop])
        taken += np.bincount(draws[:stop], minlength=len(p))
        p[draws[stop]] = 0.0  # reached its cap: its mass goes to the others


def _draw_until_count(rng: np.random.Generator, p: np.ndarray, task: int, count: int) -> np.ndarray:
    """Independent draws with probabilities `p`, up to and including the `count`-th `task`."""
    parts, seen = [], 0
    while True:
        draws = rng.choice(len(p), size=int((count - seen) / p[task] * 1.1) + 64, p=p)
        hits = np.flatnonzero(draws == task)
        if seen + len(hits) >= count:
            parts.append(draws[: hits[count - seen - 1] + 1])
            return np.concatenate(parts)
        parts.append(draws)
        seen += len(hits)


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
        if not isinstance(every, (int, np.integer)) or isinstance(every, bool) or every < 1:
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
        return {"weights": self.weights.tolist(), "updates": self.updates, "plan": self.plan,
                "policy": state}  # fmt: skip

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
