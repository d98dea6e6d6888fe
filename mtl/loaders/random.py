"""RandomLoader: the task of every step drawn at random, with a choice of task weights."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from mtl.errors import MtlError
from mtl.loaders.base import CompositeLoader

WEIGHTINGS = ("proportional", "uniform", "temperature")


class RandomLoader(CompositeLoader):
    """Each step takes one batch of a randomly drawn task.

    Weighting (`n_t` = `len()` of task t's loader, `r_t` = its batches not yet used this epoch):

    - `"proportional"` (default): `p_t ~ r_t`. Under each_once the epoch is then a uniformly
      random interleaving of all batches of all tasks (drawn as one permutation of the task ids);
      with a fixed `p_t ~ n_t` where the policy has no "remaining" (cycle_to_longest, steps).
    - `"uniform"`: `p_t` equal over the tasks not yet used up. Biased in time: a small task
      gets as many early steps as a large one, so it is front-loaded and runs out early, and the
      end of the epoch holds only the large tasks.
    - `"temperature"`: `p_t ~ min(n_t, size_cap) ** (1 / temperature)` (`size_cap=None`: no cap);
      temperature 1 is proportional to size, large temperatures approach uniform.
    - a mapping `{task: weight}`: non-negative weights for every task, not all zero.

    Fixed weights (all but proportional) are renormalised over the tasks still in play.

    One epoch:

    - `exhaust="each_once"` (default): every batch of every task exactly once; a task that runs
      out gets probability 0. `len() = sum(n_t)` (tasks with weight 0 are left out).
    - `exhaust="first"`: the epoch ends with the batch that uses up the first task.
    - `exhaust="cycle_to_longest"`: fixed probabilities; a task that runs out starts a new pass
      (fresh shuffle); the epoch ends once the longest task (weight > 0) has given `n_t` batches.
    - `steps_per_epoch=N`: N independent draws with the fixed probabilities; tasks restart a pass
      whenever they run out and continue across epochs, so the weights hold over the whole run.

    Random: the whole task sequence of epoch e is drawn up front from
    `np.random.default_rng([seed, e])`, so `len()` is exact (also for `first`) and every process
    draws the same sequence. Batch order within a task comes from that task's sampler, which gets
    `set_epoch(pass)` for every new pass.
    """

    def __init__(
        self,
        loaders: Mapping[str, Iterable],
        *,
        seed: int = 0,
        weighting: str | Mapping[str, float] = "proportional",
        temperature: float = 2.0,
        size_cap: int | None = None,
        exhaust: str | None = None,
        steps_per_epoch: int | None = None,
    ) -> None:
        super().__init__(loaders, seed=seed, exhaust=exhaust, steps_per_epoch=steps_per_epoch)
        if not isinstance(temperature, (int, float)) or not 0 < temperature < math.inf:
            raise MtlError(f"temperature: got {temperature!r}; use a number > 0")
        if size_cap is not None and (
            not isinstance(size_cap, (int, np.integer))
            or isinstance(size_cap, bool)
            or size_cap < 1
        ):
            raise MtlError(f"size_cap: got {size_cap!r}; use an integer >= 1 or null (no cap)")
        self.temperature = float(temperature)
        self.size_cap = None if size_cap is None else int(size_cap)
        if isinstance(weighting, str):
            if weighting not in WEIGHTINGS:
                raise MtlError(
                    f"weighting: got {weighting!r}; use one of {', '.join(WEIGHTINGS)} "
                    "or a mapping of task -> weight"
                )
            self.weighting: str | dict[str, float] = weighting
        elif isinstance(weighting, Mapping):
            self.weighting = self._check_weights(weighting)
        else:
            raise MtlError(f"weighting: got {weighting!r}; use a name or a task -> weight mapping")
        self.weights = self._fixed_weights()

    def _check_weights(self, weights: Mapping[str, float]) -> dict[str, float]:
        for name in weights:
            if name not in self.names:
                raise MtlError(f"weighting: unknown task {name!r}; tasks are {self.names}")
        checked = {}
        for name in self.names:
            if name not in weights:
                raise MtlError(f"weighting: no weight for task {name!r}; give one for every task")
            w = weights[name]
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < math.inf:
                raise MtlError(f"weighting: task {name!r} has weight {w!r}; use a number >= 0")
            checked[name] = float(w)
        if not any(checked.values()):
            raise MtlError("weighting: all weights are 0; give at least one task a weight > 0")
        return checked

    def _fixed_weights(self) -> np.ndarray:
        sizes = self.sizes.astype(float)
        if self.weighting == "proportional":
            return sizes
        if self.weighting == "uniform":
            return np.ones_like(sizes)
        if self.weighting == "temperature":
            capped = sizes if self.size_cap is None else np.minimum(sizes, self.size_cap)
            return capped ** (1.0 / self.temperature)
        return np.array([self.weighting[n] for n in self.names])

    def options(self) -> dict[str, Any]:
        return {
            **super().options(),
            "weighting": self.weighting,
            "temperature": self.temperature,
            "size_cap": self.size_cap,
        }

    def build_schedule(self, epoch: int) -> np.ndarray:
        rng = self.rng(epoch)
        p = self.weights / self.weights.sum()
        if self.steps_per_epoch is not None:
            return rng.choice(len(p), size=self.steps_per_epoch, p=p)
        if self.exhaust == "cycle_to_longest":
            longest = int(np.argmax(self.sizes * (p > 0)))
            return _draw_until_count(rng, p, longest, int(self.sizes[longest]))
        if self.weighting == "proportional":
            order = rng.permutation(np.repeat(np.arange(len(p)), self.sizes))
            if self.exhaust == "first":
                ends = [np.flatnonzero(order == t)[-1] for t in range(len(p))]
                order = order[: min(ends) + 1]
            return order
        return _draw_until_out(rng, self.sizes, self.weights, first_only=self.exhaust == "first")


def _draw_until_out(
    rng: np.random.Generator, sizes: np.ndarray, weights: np.ndarray, *, first_only: bool
) -> np.ndarray:
    """Draw tasks with `weights` renormalised over the tasks not yet used up, until all of them
    (or, with `first_only`, the first of them) are used up. Tasks with weight 0 are never drawn.

    Vectorised per stretch with a fixed set of active tasks: draw enough steps that one task
    surely runs out, keep the draws up to the first that does, and go on with the rest."""
    remaining = np.where(weights > 0, sizes, 0)
    parts = []
    while remaining.any():
        active = np.flatnonzero(remaining)
        n_draws = int(remaining.sum()) - len(active) + 1  # pigeonhole: some task runs out by then
        p = weights[active] / weights[active].sum()
        draws = active[rng.choice(len(active), size=n_draws, p=p)]
        out_at = min(
            hits[remaining[t] - 1]
            for t in active
            if len(hits := np.flatnonzero(draws == t)) >= remaining[t]
        )
        parts.append(draws[: out_at + 1])
        remaining -= np.bincount(parts[-1], minlength=len(remaining))
        if first_only:
            break
    return np.concatenate(parts)


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
