"""SequentialLoader: all batches of one task, then all batches of the next."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from mtl.loaders.base import CompositeLoader


class SequentialLoader(CompositeLoader):
    """Tasks one after another: every batch of the first task, then every batch of the next.

    - One epoch (`exhaust="each_once"`, the only policy and the default): one full pass over
      every task, so every batch of every task exactly once; `len() = sum(n_t)` where `n_t` is
      `len()` of task t's loader.
    - `steps_per_epoch=N` instead: the same stream of task blocks runs on without a break
      (block round r = one pass of every task), and epoch e is its steps `[e*N, (e+1)*N)`;
      a task's block can be split across epochs. `len() = N`.
    - Random: with `shuffle_tasks=True` (default) the task order of round r is a permutation
      drawn from `np.random.default_rng([seed, r])` (round r = epoch r under each_once);
      `shuffle_tasks=False` keeps the given order. Batch order within a task comes from that
      task's sampler, which gets `set_epoch(pass)` for every new pass.
    - `first` and `cycle_to_longest` make no sense here and are rejected.
    """

    exhaust_choices = ("each_once",)

    def __init__(
        self,
        loaders: Mapping[str, Iterable],
        *,
        seed: int = 0,
        shuffle_tasks: bool = True,
        exhaust: str | None = None,
        steps_per_epoch: int | None = None,
    ) -> None:
        super().__init__(loaders, seed=seed, exhaust=exhaust, steps_per_epoch=steps_per_epoch)
        self.shuffle_tasks = bool(shuffle_tasks)

    def options(self) -> dict[str, Any]:
        return {**super().options(), "shuffle_tasks": self.shuffle_tasks}

    def _round(self, r: int) -> np.ndarray:
        order = np.arange(len(self.names))
        if self.shuffle_tasks:
            order = self.rng(r).permutation(order)
        return np.repeat(order, self.sizes[order])

    def build_schedule(self, epoch: int) -> np.ndarray:
        if self.steps_per_epoch is None:
            return self._round(epoch)
        total = int(self.sizes.sum())
        first, end = epoch * self.steps_per_epoch, (epoch + 1) * self.steps_per_epoch
        rounds = range(first // total, (end - 1) // total + 1)
        stream = np.concatenate([self._round(r) for r in rounds])
        offset = rounds[0] * total
        return stream[first - offset : end - offset]
