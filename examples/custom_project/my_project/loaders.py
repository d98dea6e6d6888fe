"""A mixing strategy: runs of `block` batches of one task, the runs in random order."""

import numpy as np

from mtl.loaders import CompositeLoader


class BlockLoader(CompositeLoader):
    """Every batch of every task once per epoch, in runs of up to `block` consecutive batches
    of one task (fewer switches between heads than `random`); the runs are shuffled with the
    loader's own generator (seed and epoch)."""

    exhaust_choices = ("each_once",)

    def __init__(self, loaders, *, seed: int = 0, block: int = 4, exhaust: str | None = None):
        super().__init__(loaders, seed=seed, exhaust=exhaust)
        self.block = int(block)

    def options(self) -> dict:
        return {**super().options(), "block": self.block}

    def build_schedule(self, epoch: int) -> np.ndarray:
        runs = [
            np.full(min(self.block, int(n) - start), task)
            for task, n in enumerate(self.sizes)
            for start in range(0, int(n), self.block)
        ]
        order = self.rng(epoch).permutation(len(runs))
        return np.concatenate([runs[i] for i in order])
