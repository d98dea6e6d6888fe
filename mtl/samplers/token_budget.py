"""TokenBudgetBatchSampler: as many examples per batch as a padded-token budget allows."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from mtl.errors import MtlError
from mtl.samplers.base import BaseBatchSampler
from mtl.values import is_int


def sort_chunks_longest_first(key: np.ndarray, chunk: int) -> np.ndarray:
    """Positions that sort every run of `chunk` consecutive values of `key` (and the short last
    run) in descending order, stably; runs stay in place."""
    n = len(key)
    top = int(key.max())
    # Ascending sort of `top - key` is the descending sort of `key`; numpy radix-sorts uint16.
    flipped = (top - key).astype(np.uint16 if top < 2**16 else np.int64)
    n_full = n // chunk * chunk
    order = np.empty(n, dtype=np.int64)
    rows = np.argsort(flipped[:n_full].reshape(-1, chunk), axis=1, kind="stable")
    order[:n_full] = (rows + np.arange(0, n_full, chunk)[:, None]).ravel()
    order[n_full:] = n_full + np.argsort(flipped[n_full:], kind="stable")
    return order


def greedy_cut(sorted_lengths: np.ndarray, max_tokens: int, chunk: int) -> np.ndarray:
    """Start offsets of the batches cut from lengths sorted longest first within each run of
    `chunk`: every batch takes as many examples as `count * first_length <= max_tokens` allows
    (at least one) and never crosses a run boundary. This maximal cut has the fewest batches."""
    take = np.maximum(max_tokens // np.maximum(sorted_lengths, 1), 1)
    n = len(sorted_lengths)
    starts = []
    p = 0
    while p < n:  # one step per batch, not per example
        starts.append(p)
        end = min((p // chunk + 1) * chunk, n)
        p = min(p + int(take[p]), end)
    return np.array(starts, dtype=np.int64)


def split_largest(starts: np.ndarray, n: int, target: int) -> np.ndarray:
    """Halve the batches with most examples (starts into `n` sorted examples) until there are
    `target` batches. Halves of a batch within the budget are within it too."""
    while len(starts) < target:
        sizes = np.diff(starts, append=n)
        k = min(target - len(starts), int((sizes >= 2).sum()))
        largest = np.argpartition(-sizes, k - 1)[:k]
        starts = np.sort(np.concatenate([starts, starts[largest] + sizes[largest] // 2]))
    return starts


class TokenBudgetBatchSampler(BaseBatchSampler):
    """Batches of similar lengths, each filled up to a budget of padded tokens, in random order.

    Budget: every batch satisfies `len(batch) * max(lengths[batch]) <= max_tokens`, except that an
    example longer than `max_tokens` forms a batch on its own. Batch sizes therefore vary: many
    short examples or a few long ones.

    One epoch, all drawn from `np.random.default_rng([seed, epoch])` (no global state, the same
    on every process; call `set_epoch` for a new order):

    1. permute all indices (so chunks and the order of equal lengths change every epoch);
    2. split the permutation into chunks of `sort_bs_num * est` examples, `est` being
       `batch_size` if given, else the mean batch size of the whole-epoch cut
       (`sort_bs_num=None`: one chunk holding the whole epoch);
    3. sort each chunk longest first (stable), and cut it greedily: a batch starting at an example
       of length L takes the next `max(1, max_tokens // L)` examples of the chunk, or fewer where
       the chunk ends. This is the fewest batches any cut of the chunk can have;
    4. bring the batch count to the fixed `n_batches` (below) by halving the batches with most
       examples; then shuffle the order of all batches.

    - `len()` is exact and the same every epoch: `ceil(n_batches / num_replicas)` (minus the
      dropped tail, see `drop_last`). With one chunk the count of step 3 never changes and
      `n_batches` is that count. With several chunks it varies by a few batches between epochs,
      so `n_batches` = (step 3's count in epoch 0) + `ceil(sqrt(number of chunks))`: epochs cut
      fewer split a few batches (step 4). An epoch whose step 3 would give more batches than
      `n_batches` (rare: margin ~10 standard deviations on long-tailed lengths) is cut from
      one whole-epoch chunk instead, which never needs more batches than any chunked cut.
    - One epoch: every index exactly once over all ranks, plus the sharding padding.
    - `drop_last=True`: the last batch of the last chunk (its shortest examples, the batch most
      likely left under-filled) is dropped every epoch, so `n_batches - 1` batches. With
      `sort_bs_num=None` these are the globally shortest examples every epoch.
    - Sharding: the global batch list is padded to a multiple of `num_replicas` by repeating its
      first batches (the only duplicates); rank `r` takes batches `r, r + num_replicas, ...`.
    - `batch_size` (second positional, as the training app passes it) only sets `est` above.
      The first `len()` or epoch costs one extra cut (the whole-epoch sort and/or epoch 0).

    `lengths` is copied once; nothing passed in is modified.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int | None = None,
        *,
        max_tokens: int = 4096,
        seed: int = 0,
        sort_bs_num: int | None = None,
        drop_last: bool = False,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        super().__init__(
            lengths,
            1 if batch_size is None else batch_size,
            seed=seed,
            drop_last=drop_last,
            num_replicas=num_replicas,
            rank=rank,
        )
        self.batch_size: int | None = None if batch_size is None else self.batch_size
        if not is_int(max_tokens) or max_tokens < 1:
            raise MtlError(f"max_tokens: got {max_tokens!r}; use an integer >= 1")
        if sort_bs_num is not None and (
            not isinstance(sort_bs_num, (int, np.integer)) or sort_bs_num < 1
        ):
            raise MtlError(
                f"sort_bs_num: got {sort_bs_num!r}; use an integer >= 1, or null for one chunk"
            )
        self.max_tokens = int(max_tokens)
        self.sort_bs_num = None if sort_bs_num is None else int(sort_bs_num)
        self._chunk: int | None = None
        self._n_batches: int | None = None

    def _cut(self, perm: np.ndarray, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        """(indices sorted longest first within chunks, batch start offsets into them)."""
        order = perm[sort_chunks_longest_first(self.lengths[perm], chunk)]
        return order, greedy_cut(self.lengths[order], self.max_tokens, chunk)

    @property
    def chunk(self) -> int:
        """Examples per sorted chunk (step 2)."""
        if self._chunk is None:
            n = len(self.lengths)
            if self.sort_bs_num is None:
                self._chunk = n
            else:
                est = self.batch_size
                if est is None:
                    whole = np.sort(self.lengths)[::-1]
                    est = max(1, round(n / len(greedy_cut(whole, self.max_tokens, n))))
                self._chunk = min(n, self.sort_bs_num * est)
        return self._chunk

    @property
    def n_batches(self) -> int:
        """Global batches per epoch before `drop_last` (fixed; see the class docstring)."""
        if self._n_batches is None:
            n = len(self.lengths)
            rng = np.random.default_rng([self.seed, 0])
            count = len(self._cut(rng.permutation(n), self.chunk)[1])
            n_chunks = -(-n // self.chunk)
            margin = 0 if n_chunks == 1 else math.ceil(math.sqrt(n_chunks))
            self._n_batches = min(n, count + margin)
        return self._n_batches

    def num_global_batches(self) -> int:
        return self.n_batches - (1 if self.drop_last else 0)

    def drop_short(self, batches: list[np.ndarray]) -> list[np.ndarray]:
        return batches  # `global_batches` already dropped the tail batch

    def global_batches(self, rng: np.random.Generator) -> list[np.ndarray]:
        n = len(self.lengths)
        perm = rng.permutation(n)
        order, starts = self._cut(perm, self.chunk)
        if len(starts) > self.n_batches:
            order, starts = self._cut(perm, n)
        starts = split_largest(starts, n, self.n_batches)
        batches = np.split(order, starts[1:])
        if self.drop_last:
            batches.pop()
        return [batches[i] for i in rng.permutation(len(batches))]
