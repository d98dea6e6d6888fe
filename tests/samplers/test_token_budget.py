"""Contract of TokenBudgetBatchSampler."""

from functools import partial

import numpy as np
import pytest
from hydra.utils import instantiate
from hypothesis import given, settings
from hypothesis import strategies as st

from mtl.errors import MtlError
from mtl.samplers import TokenBudgetBatchSampler
from mtl.samplers.token_budget import greedy_cut, split_largest
from mtl.testing import check_sampler

lengths_st = st.lists(st.integers(0, 300), min_size=1, max_size=200)
options_st = st.fixed_dictionaries(
    {
        "batch_size": st.none() | st.integers(1, 8),
        "max_tokens": st.integers(1, 600),
        "sort_bs_num": st.none() | st.integers(1, 4),
        "drop_last": st.booleans(),
        "seed": st.integers(0, 2**32),
    }
)


def within_budget(lengths, batch, max_tokens):
    return len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= max_tokens


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, options=options_st, epoch=st.integers(0, 3))
def test_every_example_once_within_budget_and_len_exact(lengths, options, epoch):
    s = TokenBudgetBatchSampler(lengths, **options)
    s.set_epoch(epoch)
    batches = list(s)
    assert len(batches) == len(s) == s.n_batches - options["drop_last"]
    assert all(within_budget(lengths, b, options["max_tokens"]) for b in batches)
    flat = [i for batch in batches for i in batch]
    assert len(flat) == len(set(flat))
    if not options["drop_last"]:
        assert sorted(flat) == list(range(len(lengths)))


@settings(max_examples=40, deadline=None)
@given(lengths=lengths_st, options=options_st)
def test_keeps_the_sampler_contract(lengths, options):
    """Coverage, determinism, sharding over 2 and 3 ranks, set_start (mtl.testing)."""
    batch_size, seed = options.pop("batch_size"), options.pop("seed")
    make = partial(TokenBudgetBatchSampler, **options)
    check_sampler(
        make, batch_size=batch_size, seed=seed, lengths=[lengths], fixed_batch_size=False, epochs=2
    )


@pytest.mark.parametrize("sort_bs_num", [None, 1, 10])
def test_len_is_the_same_every_epoch_on_long_tailed_lengths(sort_bs_num):
    lengths = np.random.default_rng(0).lognormal(4, 1, 20_000).astype(int) + 1
    s = TokenBudgetBatchSampler(lengths, 32, max_tokens=2048, sort_bs_num=sort_bs_num, seed=4)
    for epoch in range(4):
        batches = s.epoch_batches(epoch)
        assert len(batches) == len(s)
        assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))


def test_whole_epoch_sort_fills_the_budget():
    lengths = np.random.default_rng(1).lognormal(4, 1, 5000).astype(int) + 1
    batches = TokenBudgetBatchSampler(lengths, max_tokens=4096).epoch_batches(0)
    padded = sum(len(b) * lengths[b].max() for b in batches)
    assert lengths.sum() / padded > 0.95  # little padding
    assert padded / (len(batches) * 4096) > 0.9  # and batches close to the budget


def test_long_example_gets_its_own_batch():
    lengths = [10, 5000, 10, 10]
    batches = list(TokenBudgetBatchSampler(lengths, max_tokens=100))
    assert [1] in batches
    assert sorted(i for b in batches for i in b) == [0, 1, 2, 3]


def test_epochs_differ_and_order_is_shuffled():
    lengths = np.random.default_rng(2).integers(1, 200, 3000)
    s = TokenBudgetBatchSampler(lengths, max_tokens=1000, sort_bs_num=5, batch_size=16)
    e0, e1 = s.epoch_batches(0), s.epoch_batches(1)
    assert {frozenset(b.tolist()) for b in e0} != {frozenset(b.tolist()) for b in e1}
    steps = np.diff([lengths[b].max() for b in e0])
    assert (steps > 0).any() and (steps < 0).any()


def test_too_many_chunked_batches_fall_back_to_one_chunk():
    lengths = np.random.default_rng(3).integers(1, 100, 500)
    s = TokenBudgetBatchSampler(lengths, 4, max_tokens=400, sort_bs_num=1)
    whole = len(greedy_cut(np.sort(lengths)[::-1], 400, len(lengths)))
    s._n_batches = whole  # fewer than any chunked cut can reach: every epoch falls back
    for epoch in range(3):
        batches = s.epoch_batches(epoch)
        assert len(batches) == whole
        assert all(within_budget(lengths, b, 400) for b in batches)


@given(sizes=st.lists(st.integers(1, 20), min_size=1, max_size=30), extra=st.integers(0, 100))
def test_split_largest_reaches_the_target(sizes, extra):
    starts = np.cumsum([0] + sizes[:-1])
    n = sum(sizes)
    target = min(n, len(sizes) + extra)
    out = split_largest(starts, n, target)
    assert len(out) == target and len(set(out.tolist())) == target
    assert set(starts.tolist()) <= set(out.tolist())


def test_config_builds_it_the_way_the_training_app_calls_it(compose_cfg):
    """The app calls make_sampler(lengths, batch_size, seed=, num_replicas=, rank=)."""
    cfg = compose_cfg("sampler=token_budget", "task=[synthetic_cls]")
    make_sampler = instantiate(cfg.sampler)
    s = make_sampler([3, 1, 2], 8, seed=1, num_replicas=1, rank=0)
    assert isinstance(s, TokenBudgetBatchSampler)
    assert (s.batch_size, s.max_tokens, s.sort_bs_num) == (8, 4096, None)
    assert list(s) == [[0, 2, 1]]


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"batch_size": 0}, "batch_size"),
        ({"sort_bs_num": 0}, "sort_bs_num"),
        ({"lengths": []}, "lengths"),
        ({"rank": 2, "num_replicas": 2}, "rank"),
    ],
)
def test_bad_input_names_the_option(kwargs, option):
    args = {"lengths": [1, 2, 3]} | kwargs
    with pytest.raises(MtlError, match=option):
        TokenBudgetBatchSampler(**args)
