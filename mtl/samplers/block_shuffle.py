"""BlockShuffleBatchSampler: length-sorted batches within chunks, batches in random order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mtl.errors import MtlError
from mtl.samplers.base import BaseBatchSampler, cut_into_batches


class BlockShuffleBatchSampler(BaseBatchSampler):
    """Batches of similar lengths (little padding) in a random order: the BlockShuffle trick.

    One epoch, all drawn from `np.random.default_rng([seed, epoch])` (no global state, the same
    on every process; call `set_epoch` for a new order):

    1. permute all indices, so chunks and the order of equal lengths change every epoch;
    2. split the permutation into chunks of `sort_bs_num * batch_size` examples
       (`sort_bs_num=None`: one chunk holding the whole epoch);
    3. sort each chunk by length, longest first (stable);
    4. cut each chunk into batches of `batch_size`, then shuffle the order of all batches.

    - One epoch: every index exactly once over all ranks, plus the sharding padding (below).
    - `len()`: the batches this rank yields per epoch, `ceil(n_batches / num_replicas)` with
      `n_batches = ceil(n / batch_size)` (`floor` with `drop_last`), as for `RandomBatchSampler`.
    - Tail: chunks hold a multiple of `batch_size` examples, so only the last chunk can leave a
      short batch (its shortest examples). It is kept and shuffled with the other batches, or
      dropped with `drop_last=True`.
    - `sort_noise`: when length correlates with the label, sorting puts whole batches of one label
      together. With `sort_noise > 0` the sort key is `length * (1 + u)`,
      `u ~ Uniform(-sort_noise, sort_noise)` from the same seeded generator, so examples of
      near-equal lengths mix across batches (at the cost of a little more padding).
      `0.0` (the default) sorts by exact length.
    - Sharding: the global batch list is padded to a multiple of `num_replicas` by repeating its
      first batches (the only duplicates); rank `r` takes batches `r, r + num_replicas, ...`.

    `lengths` is copied once; nothing passed in is modified.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        *,
        seed: int = 0,
        sort_bs_num: int | None = None,
        sort_noise: float = 0.0,
        drop_last: bool = False,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        super().__init__(
            lengths,
            batch_size,
            seed=seed,
            drop_last=drop_last,
            num_replicas=num_replicas,
            rank=rank,
        )
        if sort_bs_num is not None and (
            not isinstance(sort_bs_num, (int, np.integer)) or sort_bs_num < 1
        ):
            raise MtlError(
                f"sort_bs_num: got {sort_bs_num!r}; use an integer >= 1, or null for one chunk"
            )
        if not isinstance(sort_noise, (int, float, np.number)) or not sort_noise >= 0:
            raise MtlError(f"sort_noise: got {sort_noise!r}; use a number >= 0 (0.0 disables it)")
        self.sort_bs_num = None if sort_bs_num is None else int(sort_bs_num)
        self.sort_noise = float(sort_noise)
        # Sort key without noise, built once: ascending order of `top - length` is longest first,
        # and as uint16 it is a 2-byte gather per epoch that numpy radix-sorts.
        top = int(self.lengths.max())
        self._exact_key = (top - self.lengths).astype(np.uint16) if top < 2**16 else -self.lengths

    def global_batches(self, rng: np.random.Generator) -> list[np.ndarray]:
        n = len(self.lengths)
        perm = rng.permutation(n)
        if self.sort_noise > 0:
            noise = rng.uniform(-self.sort_noise, self.sort_noise, n)
            key = -self.lengths[perm] * (1.0 + noise)
        else:
            key = self._exact_key[perm]
        chunk = n if self.sort_bs_num is None else min(n, self.sort_bs_num * self.batch_size)

        # Ascending stable sort of `key` (longest first): every full chunk as one row of a 2-D
        # array, then the short last chunk on its own; one chunk needs no offsets.
        if chunk == n:
            order = np.argsort(key, kind="stable")
        else:
            n_full = n // chunk * chunk
            order = np.empty(n, dtype=np.int64)
            rows = np.argsort(key[:n_full].reshape(-1, chunk), axis=1, kind="stable")
            rows += np.arange(0, n_full, chunk)[:, None]
            order[:n_full] = rows.ravel()
            order[n_full:] = n_full + np.argsort(key[n_full:], kind="stable")

        batches = cut_into_batches(perm[order], self.batch_size)
        return [batches[i] for i in rng.permutation(len(batches))]
