"""Shared machinery of the batch samplers: validation, seeding, sharding and resume.

A subclass implements only `global_batches(rng)`: the whole epoch's batches, identical on every
process because `rng` is `np.random.default_rng([seed, epoch])`. This base class drops the short
batch (`drop_last`), pads the list for `num_replicas` and hands each rank its share.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler

from mtl.errors import MtlError


def _as_lengths(lengths: Sequence[int]) -> np.ndarray:
    """Copy `lengths` into a read-only 1-D int64 array, or raise MtlError."""
    if not isinstance(lengths, np.ndarray) and hasattr(lengths, "__getitem__"):
        lengths = lengths[:]  # a `datasets` Column converts in one call here, not row by row
    try:
        array = np.array(lengths)
    except (TypeError, ValueError) as err:
        raise MtlError(f"lengths: cannot read as a sequence of ints ({err})") from None
    if array.size == 0:
        raise MtlError("lengths: empty; the dataset needs at least one example")
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise MtlError(
            f"lengths: expected a flat sequence of ints, got shape {array.shape} of {array.dtype}"
        )
    if array.min() < 0:
        raise MtlError(f"lengths: found a negative length ({array.min()}); lengths must be >= 0")
    array = array.astype(np.int64, copy=False)
    array.flags.writeable = False
    return array


def _check_epoch(epoch: int) -> int:
    if not isinstance(epoch, (int, np.integer)) or epoch < 0:
        raise MtlError(f"epoch: got {epoch!r}; use an integer >= 0")
    return int(epoch)


def cut_into_batches(indices: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Consecutive batches of `batch_size`; the last one is short if `len(indices)` is not a
    multiple of it. The batches are views of `indices`."""
    n_full = len(indices) // batch_size * batch_size
    batches = list(indices[:n_full].reshape(-1, batch_size))
    if n_full < len(indices):
        batches.append(indices[n_full:])
    return batches


class BaseBatchSampler(Sampler[list[int]]):
    """Yields lists of dataset indices; the batch list of an epoch is a pure function of
    (seed, epoch, lengths, options).

    Sharding: the global batch list (identical on every rank) is padded to a multiple of
    `num_replicas` by repeating batches from its start (the only duplicates), then rank `r` takes
    batches `r, r + num_replicas, ...`. Every rank yields `len(self)` batches.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        *,
        seed: int = 0,
        drop_last: bool = False,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        super().__init__()
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise MtlError(f"batch_size: got {batch_size!r}; use an integer >= 1")
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise MtlError(f"seed: got {seed!r}; use an integer >= 0")
        if not isinstance(num_replicas, (int, np.integer)) or num_replicas < 1:
            raise MtlError(f"num_replicas: got {num_replicas!r}; use an integer >= 1")
        if not isinstance(rank, (int, np.integer)) or not 0 <= rank < num_replicas:
            raise MtlError(
                f"rank: got {rank!r}; use an integer in [0, num_replicas={num_replicas})"
            )
        self.lengths = _as_lengths(lengths)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.epoch = 0
        self._start = 0

    def global_batches(self, rng: np.random.Generator) -> list[np.ndarray]:
        """All batches of one epoch for all ranks, in iteration order; at most one is short."""
        raise NotImplementedError

    def drop_short(self, batches: list[np.ndarray]) -> list[np.ndarray]:
        """`drop_last=True`: the batches that remain; by default those of exactly `batch_size`."""
        return [batch for batch in batches if len(batch) == self.batch_size]

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order the next iteration yields."""
        self.epoch = _check_epoch(epoch)

    def set_start(self, k: int) -> None:
        """Resume: the next iteration starts at this rank's batch `k` of the current epoch.

        One-shot: the iteration that yields first takes it, later ones start at 0 again (a
        DataLoader with workers calls `iter()` twice and reads only the second iterator, so the
        start is taken at the first batch, not at `iter()`). No data is loaded for the skipped
        batches.
        """
        if not isinstance(k, (int, np.integer)) or not 0 <= k <= len(self):
            raise MtlError(
                f"start batch: got {k!r}; use an integer in [0, len(sampler)={len(self)}]"
            )
        self._start = int(k)

    def num_global_batches(self) -> int:
        n_full, tail = divmod(len(self.lengths), self.batch_size)
        return n_full + (1 if tail and not self.drop_last else 0)

    def __len__(self) -> int:
        """Batches this rank yields in one full epoch (not reduced by `set_start`)."""
        return -(-self.num_global_batches() // self.num_replicas)

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's full batch list for `epoch` (exactly what iterating that epoch yields)."""
        rng = np.random.default_rng([self.seed, _check_epoch(epoch)])
        batches = self.global_batches(rng)
        if self.drop_last:
            batches = self.drop_short(batches)
        n_padding = -len(batches) % self.num_replicas
        if batches:
            batches += [batches[i % len(batches)] for i in range(n_padding)]
        return batches[self.rank :: self.num_replicas]

    def __iter__(self) -> Iterator[list[int]]:
        # A generator: nothing runs until the first batch is asked for (see `set_start`).
        start, self._start = self._start, 0
        for batch in self.epoch_batches(self.epoch)[start:]:
            yield batch.tolist()
