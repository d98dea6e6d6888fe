"""RandomLoader: the task of every step drawn at random, with a choice of task weights."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from mtl.errors import MtlError
from mtl.loaders.weighted import WeightedLoader


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
    `trainer.epochs`) is needed by what moves. The mixture's options (`**mixture`) are
    `mtl.loaders.mixture.MixtureOptions`'. `online` ({policy, update_every, options}:
    `mtl.loaders.online.OnlineMixing`): a policy's weights, redrawn during the epoch.

    Random: the task sequence of epoch e is drawn up front from `np.random.default_rng([seed,
    e])`, so `len()` is exact and every process draws the same sequence. Batch order within a
    task comes from that task's sampler, which gets `set_epoch(pass)` for every new pass.
    """

    def __init__(
        self,
        loaders: Mapping[str, Iterable],
        *,
        seed: int = 0,
        exhaust: str | None = None,
        steps_per_epoch: int | None = None,
        epochs: int | None = None,
        online: Mapping[str, Any] | None = None,
        **mixture: Any,
    ) -> None:
        super().__init__(loaders, seed=seed, exhaust=exhaust, steps_per_epoch=steps_per_epoch)
        self.mix(mixture, online, epochs)
        caps = self.mixture.caps
        if caps is not None and self.exhaust == "cycle_to_longest" and self.steps_per_epoch is None:
            longest = int(np.argmax(self.sizes * self.mixture.in_play()))
            if caps[longest] < self.sizes[longest]:
                raise MtlError(
                    f"loader.max_passes: task {self.names[longest]!r} ends each epoch after one "
                    "pass (exhaust=cycle_to_longest); give it at least 1"
                )

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
