"""A batch sampler: the longest batch first, so that running out of memory shows at step 1."""

import numpy as np

from mtl.samplers.base import BaseBatchSampler, cut_into_batches


class LongestFirstBatchSampler(BaseBatchSampler):
    """Shuffle, cut into batches, then move the batch holding the longest example to the front.

    One epoch: every example once (plus mtl's padding batches when sharded); `len()` and
    resume come from `BaseBatchSampler`. Random: the shuffle, from `rng` (seed and epoch).
    """

    def global_batches(self, rng: np.random.Generator) -> list[np.ndarray]:
        batches = cut_into_batches(rng.permutation(len(self.lengths)), self.batch_size)
        longest = max(range(len(batches)), key=lambda i: self.lengths[batches[i]].max())
        return [batches[longest], *batches[:longest], *batches[longest + 1 :]]
