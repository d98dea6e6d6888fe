"""mtl.testing.check_sampler holds for every built-in sampler and fails a broken one."""

from functools import partial

import numpy as np
import pytest

from mtl.samplers import BlockShuffleBatchSampler, RandomBatchSampler, TokenBudgetBatchSampler
from mtl.samplers.base import BaseBatchSampler, cut_into_batches
from mtl.testing import check_sampler

BUILTIN = [
    (RandomBatchSampler, {}),
    (RandomBatchSampler, {"drop_last": True}),
    (BlockShuffleBatchSampler, {}),
    (BlockShuffleBatchSampler, {"sort_bs_num": 2, "sort_noise": 0.2}),
    (BlockShuffleBatchSampler, {"sort_bs_num": 50, "drop_last": True}),
    (TokenBudgetBatchSampler, {"max_tokens": 200}),
    (TokenBudgetBatchSampler, {"max_tokens": 64, "sort_bs_num": 2, "drop_last": True}),
]


@pytest.mark.parametrize(("cls", "options"), BUILTIN, ids=str)
@pytest.mark.parametrize("batch_size", [1, 8])
def test_every_builtin_sampler_keeps_the_contract(cls, options, batch_size):
    fixed = cls is not TokenBudgetBatchSampler
    check_sampler(partial(cls, **options), batch_size=batch_size, fixed_batch_size=fixed, seed=5)


class GlobalRandom(BaseBatchSampler):
    """Broken: shuffles with numpy's global generator, so processes and twins disagree."""

    def global_batches(self, rng):
        return cut_into_batches(np.random.permutation(len(self.lengths)), self.batch_size)


class LosesOne(BaseBatchSampler):
    """Broken: leaves the last example out of every epoch."""

    def global_batches(self, rng):
        return cut_into_batches(rng.permutation(len(self.lengths))[1:], self.batch_size)

    def num_global_batches(self):
        return len(cut_into_batches(np.arange(len(self.lengths) - 1), self.batch_size))


class StartsOneLate(RandomBatchSampler):
    """Broken: set_start(k) skips k + 1 batches."""

    def set_start(self, k):
        super().set_start(min(k + 1, len(self)))


class UnevenShards(RandomBatchSampler):
    """Broken: ranks yield different numbers of batches (a distributed run would hang)."""

    def epoch_batches(self, epoch):
        batches = self.global_batches(np.random.default_rng([self.seed, epoch]))
        return batches[self.rank :: self.num_replicas]

    def __len__(self):
        return len(self.epoch_batches(self.epoch))


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (GlobalRandom, "twin differs"),
        (LosesOne, "left out"),
        (StartsOneLate, r"set_start\(0\) is not the rest"),
        (UnevenShards, "batches per rank"),
    ],
)
def test_a_broken_sampler_fails_the_check_naming_the_promise(broken, message):
    with pytest.raises(AssertionError, match=message):
        check_sampler(broken, batch_size=4)
