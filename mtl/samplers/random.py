"""RandomBatchSampler: a fresh random permutation cut into batches every epoch."""

from __future__ import annotations

import numpy as np

from mtl.samplers.base import BaseBatchSampler, cut_into_batches


class RandomBatchSampler(BaseBatchSampler):
    """Shuffle all examples, then cut the permutation into consecutive batches of `batch_size`.

    - One epoch: every index of `lengths` exactly once over all ranks, plus the padding batches
      repeated for sharding (see below). `lengths` only sets the dataset size here.
    - `len()`: the batches this rank yields per epoch,
      `ceil(n_batches / num_replicas)` with `n_batches = ceil(n / batch_size)`
      (`floor` with `drop_last`).
    - Random: the permutation, from `np.random.default_rng([seed, epoch])` (no global state), so
      every process computes the same order; call `set_epoch` to get a new one.
    - Tail: the last batch is short when `batch_size` does not divide `n`; kept, or dropped with
      `drop_last=True`.
    - Sharding: the global batch list is padded to a multiple of `num_replicas` by repeating its
      first batches (the only duplicates); rank `r` takes batches `r, r + num_replicas, ...`.
    """

    def global_batches(self, rng: np.random.Generator) -> list[np.ndarray]:
        return cut_into_batches(rng.permutation(len(self.lengths)), self.batch_size)
