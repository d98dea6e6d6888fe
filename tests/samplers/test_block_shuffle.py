"""Contract of BlockShuffleBatchSampler."""

from collections import defaultdict
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtl.errors import MtlError
from mtl.samplers import BlockShuffleBatchSampler, RandomBatchSampler
from mtl.testing import check_sampler

lengths_st = st.lists(st.integers(0, 1000), min_size=1, max_size=200)
options_st = st.fixed_dictionaries(
    {
        "batch_size": st.integers(1, 20),
        "sort_bs_num": st.none() | st.integers(1, 5),
        "sort_noise": st.sampled_from([0.0, 0.2, 2.0]),
        "drop_last": st.booleans(),
        "seed": st.integers(0, 2**32),
    }
)


def padding_efficiency(lengths, batches):
    """Real tokens / tokens after padding every batch to its longest example."""
    lengths = np.asarray(lengths)
    return lengths.sum() / sum(lengths[b].max() * len(b) for b in batches)


@settings(max_examples=50, deadline=None)
@given(lengths=lengths_st, options=options_st)
def test_len_coverage_and_sizes(lengths, options):
    batch_size, drop_last = options["batch_size"], options["drop_last"]
    plain = list(BlockShuffleBatchSampler(lengths, **options))
    flat = [i for batch in plain for i in batch]
    assert len(flat) == len(set(flat))
    if drop_last:
        assert len(flat) == len(lengths) // batch_size * batch_size
    else:
        assert sorted(flat) == list(range(len(lengths)))
    short = [batch for batch in plain if len(batch) != batch_size]
    assert len(short) <= (0 if drop_last else 1)


@settings(max_examples=50, deadline=None)
@given(lengths=lengths_st, options=options_st)
def test_keeps_the_sampler_contract(lengths, options):
    """Coverage, sizes, determinism, sharding over 2 and 3 ranks, set_start (mtl.testing)."""
    batch_size, seed = options.pop("batch_size"), options.pop("seed")
    make = partial(BlockShuffleBatchSampler, **options)
    check_sampler(make, batch_size=batch_size, seed=seed, lengths=[lengths], epochs=2)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("epoch", range(3))
def test_reference_case_sorts_the_long_examples_together(seed, epoch):
    lengths = [1, 2, 3, 4, 512, 512, 512, 512]
    s = BlockShuffleBatchSampler(lengths, 2, seed=seed)
    s.set_epoch(epoch)
    assert sorted(max(lengths[i] for i in batch) for batch in s) == [2, 4, 512, 512]


def test_epochs_differ_and_batch_order_is_shuffled():
    lengths = np.random.default_rng(0).permutation(1000) + 1  # distinct lengths
    s = BlockShuffleBatchSampler(lengths, 10, seed=3)
    epoch0 = list(s)
    s.set_epoch(1)
    assert list(s) != epoch0
    maxima = np.array([lengths[b].max() for b in s.epoch_batches(0)])
    steps = np.diff(maxima)
    assert (steps > 0).any() and (steps < 0).any()


@settings(max_examples=50, deadline=None)
@given(
    lengths=lengths_st,
    batch_size=st.integers(1, 8),
    sort_bs_num=st.integers(1, 4),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 3),
)
def test_batches_come_from_one_chunk_and_are_sorted_within_it(
    lengths, batch_size, sort_bs_num, seed, epoch
):
    lengths = np.array(lengths)
    s = BlockShuffleBatchSampler(lengths, batch_size, seed=seed, sort_bs_num=sort_bs_num)
    # White box: the sampler's first draw is the permutation that defines the chunks.
    perm = np.random.default_rng([seed, epoch]).permutation(len(lengths))
    chunk_of = np.empty(len(lengths), dtype=np.int64)
    chunk_of[perm] = np.arange(len(lengths)) // (sort_bs_num * batch_size)
    by_chunk = defaultdict(list)
    for batch in s.epoch_batches(epoch):
        assert len(set(chunk_of[batch])) == 1
        assert (np.diff(lengths[batch]) <= 0).all()  # longest first
        by_chunk[chunk_of[batch[0]]].append((lengths[batch].min(), lengths[batch].max()))
    for ranges in by_chunk.values():  # a chunk's batches hold non-overlapping length ranges
        ranges.sort()
        assert all(hi <= lo for (_, hi), (lo, _) in zip(ranges, ranges[1:], strict=False))


def test_padding_efficiency_beats_random_on_long_tailed_lengths():
    lengths = np.random.default_rng(0).lognormal(4, 1, 5000).astype(int) + 1
    for epoch in range(3):
        block = BlockShuffleBatchSampler(lengths, 16, sort_bs_num=10).epoch_batches(epoch)
        whole = BlockShuffleBatchSampler(lengths, 16).epoch_batches(epoch)
        random = RandomBatchSampler(lengths, 16).epoch_batches(epoch)
        assert padding_efficiency(lengths, whole) >= padding_efficiency(lengths, block)
        assert padding_efficiency(lengths, block) > padding_efficiency(lengths, random)


def test_random_sampler_pads_where_block_shuffle_does_not():
    lengths = [1, 2, 3, 4, 512, 512, 512, 512]
    n_padded_to_512 = [
        sum(
            max(lengths[i] for i in batch) == 512
            for batch in RandomBatchSampler(lengths, 2, seed=s)
        )
        for s in range(50)
    ]
    assert max(n_padded_to_512) > 2  # some epoch pads up to 4 batches to 512


def test_sort_noise_mixes_near_equal_lengths():
    lengths = np.random.default_rng(1).permutation(400) + 100  # no ties
    exact = BlockShuffleBatchSampler(lengths, 8, seed=5).epoch_batches(0)
    noisy = BlockShuffleBatchSampler(lengths, 8, seed=5, sort_noise=0.5).epoch_batches(0)
    assert {frozenset(b.tolist()) for b in exact} != {frozenset(b.tolist()) for b in noisy}
    # still one sorted run per batch without noise: consecutive lengths only
    assert all(np.ptp(lengths[b]) == len(b) - 1 for b in exact)


def test_short_tail_batch_is_kept_or_dropped():
    lengths = [1, 2, 3, 4, 512, 512, 512, 512, 7]
    kept = BlockShuffleBatchSampler(lengths, 2, seed=0)
    assert len(kept) == 5 and sorted(len(b) for b in kept) == [1, 2, 2, 2, 2]
    dropped = BlockShuffleBatchSampler(lengths, 2, seed=0, drop_last=True)
    assert len(dropped) == 4 and all(len(b) == 2 for b in dropped)


def test_lengths_are_not_mutated():
    as_list = [5, 1, 4, 1, 5, 9, 2, 6]
    as_array = np.array(as_list)
    for lengths in (as_list, as_array):
        s = BlockShuffleBatchSampler(lengths, 3, sort_bs_num=1, sort_noise=0.3)
        list(s)
        s.epoch_batches(4)
    assert as_list == [5, 1, 4, 1, 5, 9, 2, 6]
    assert as_array.tolist() == as_list


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"sort_bs_num": 0}, "sort_bs_num"),
        ({"sort_noise": -0.1}, "sort_noise"),
        ({"sort_noise": float("nan")}, "sort_noise"),
        ({"lengths": []}, "lengths"),
        ({"lengths": [3, -2]}, "lengths"),
        ({"rank": 3, "num_replicas": 3}, "rank"),
    ],
)
def test_bad_input_names_the_option(kwargs, option):
    args = {"lengths": [1, 2, 3], "batch_size": 2} | kwargs
    with pytest.raises(MtlError, match=option):
        BlockShuffleBatchSampler(**args)
