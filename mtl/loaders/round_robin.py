"""RoundRobinLoader: one batch of each task in turn, in the given order."""

from __future__ import annotations

import numpy as np

from mtl.loaders.base import CompositeLoader


class RoundRobinLoader(CompositeLoader):
    """One batch of each task in turn, always in the given task order. Nothing here is random
    (`seed` is accepted for a uniform interface); batch order within a task comes from that
    task's sampler, which gets `set_epoch(pass)` for every new pass.

    With `n_t` = `len()` of task t's loader and `T` tasks, one epoch is:

    - `exhaust="each_once"` (default): rounds until every task is used up; a task that runs out
      drops out of the rotation. Every batch of every task exactly once; `len() = sum(n_t)`.
    - `exhaust="first"`: `min(n_t)` full rounds, so every task gives `min(n_t)` batches;
      `len() = T * min(n_t)`.
    - `exhaust="cycle_to_longest"`: `max(n_t)` full rounds; a task that runs out starts a new
      pass (fresh shuffle). `len() = T * max(n_t)`.
    - `steps_per_epoch=N`: N steps; the rotation continues across epochs (step i of epoch e is
      task `(e*N + i) mod T`), tasks restart a pass whenever they run out. `len() = N`.
    """

    def build_schedule(self, epoch: int) -> np.ndarray:
        n_tasks = len(self.names)
        if self.steps_per_epoch is not None:
            start = epoch * self.steps_per_epoch
            return np.arange(start, start + self.steps_per_epoch) % n_tasks
        if self.exhaust == "first":
            return np.tile(np.arange(n_tasks), self.sizes.min())
        longest = self.sizes.max()
        grid = np.tile(np.arange(n_tasks), (longest, 1))  # [round, task]
        if self.exhaust == "each_once":
            return grid[np.arange(longest)[:, None] < self.sizes[None, :]]  # row-major: by round
        return grid.ravel()
