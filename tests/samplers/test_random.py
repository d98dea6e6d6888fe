"""Contract of RandomBatchSampler (and the shared sharding/resume logic of the base class)."""

from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mtl.errors import MtlError
from mtl.samplers import RandomBatchSampler

lengths_st = st.lists(st.integers(0, 1000), min_size=1, max_size=200)


def all_ranks(lengths, batch_size, num_replicas, epoch=0, **kwargs):
    """Each rank's batches (lists of ints) for `epoch`, by iterating the samplers."""
    ranks = []
    for rank in range(num_replicas):
        s = RandomBatchSampler(lengths, batch_size, num_replicas=num_replicas, rank=rank, **kwargs)
        s.set_epoch(epoch)
        ranks.append(list(s))
    return ranks


@settings(max_examples=50, deadline=None)
@given(
    lengths=lengths_st,
    batch_size=st.integers(1, 20),
    drop_last=st.booleans(),
    num_replicas=st.integers(1, 3),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 5),
)
def test_len_is_exact_and_equal_on_every_rank(
    lengths, batch_size, drop_last, num_replicas, seed, epoch
):
    options = {"seed": seed, "drop_last": drop_last, "num_replicas": num_replicas}
    sizes = set()
    for rank in range(num_replicas):
        s = RandomBatchSampler(lengths, batch_size, **options, rank=rank)
        s.set_epoch(epoch)
        assert len(list(s)) == len(s)
        sizes.add(len(s))
    assert len(sizes) == 1


@settings(max_examples=50, deadline=None)
@given(lengths=lengths_st, batch_size=st.integers(1, 20), drop_last=st.booleans())
def test_every_index_once_and_batch_sizes(lengths, batch_size, drop_last):
    (batches,) = all_ranks(lengths, batch_size, 1, drop_last=drop_last)
    flat = [i for batch in batches for i in batch]
    assert len(flat) == len(set(flat))
    if not drop_last:
        assert sorted(flat) == list(range(len(lengths)))
    else:
        assert len(flat) == len(lengths) // batch_size * batch_size
    short = [batch for batch in batches if len(batch) != batch_size]
    assert len(short) <= (0 if drop_last else 1)
    assert all(0 < len(batch) < batch_size for batch in short)
    assert all(type(i) is int for i in flat)


@settings(max_examples=50, deadline=None)
@given(
    lengths=lengths_st,
    batch_size=st.integers(1, 20),
    drop_last=st.booleans(),
    num_replicas=st.integers(1, 3),
)
def test_sharding_covers_the_epoch_and_only_pads_duplicates(
    lengths, batch_size, drop_last, num_replicas
):
    (plain,) = all_ranks(lengths, batch_size, 1, drop_last=drop_last)
    ranks = all_ranks(lengths, batch_size, num_replicas, drop_last=drop_last)
    assert len({len(batches) for batches in ranks}) == 1
    # Rank r holds batches r, r + num_replicas, ... of the plain list padded from its start.
    n_padding = -len(plain) % num_replicas
    padded = plain + [plain[i % len(plain)] for i in range(n_padding)] if plain else []
    for rank, batches in enumerate(ranks):
        assert batches == padded[rank::num_replicas]
    sharded = Counter(tuple(b) for batches in ranks for b in batches)
    assert sharded == Counter(tuple(b) for b in padded)
    assert {i for batches in ranks for b in batches for i in b} == {i for b in plain for i in b}


@settings(max_examples=50, deadline=None)
@given(
    lengths=lengths_st,
    batch_size=st.integers(1, 20),
    num_replicas=st.integers(1, 3),
    seed=st.integers(0, 2**32),
    data=st.data(),
)
def test_set_start_resumes_then_next_epoch_is_full(lengths, batch_size, num_replicas, seed, data):
    s = RandomBatchSampler(
        lengths, batch_size, seed=seed, num_replicas=num_replicas, rank=num_replicas - 1
    )
    s.set_epoch(3)
    full = [b.tolist() for b in s.epoch_batches(3)]
    assert list(s) == full
    k = data.draw(st.integers(0, len(s)))
    s.set_start(k)
    assert list(s) == full[k:]
    assert list(s) == full


def test_same_seed_same_order_and_epochs_differ():
    lengths = list(range(100))
    a, b = RandomBatchSampler(lengths, 8, seed=7), RandomBatchSampler(lengths, 8, seed=7)
    assert list(a) == list(b)
    a.set_epoch(1)
    assert list(a) != list(b)
    assert list(a) != list(RandomBatchSampler(lengths, 8, seed=8))
    for epoch in (0, 1, 2):
        x, y = a.epoch_batches(epoch), b.epoch_batches(epoch)
        assert all(np.array_equal(u, v) for u, v in zip(x, y, strict=True))


def test_works_as_dataloader_batch_sampler():
    s = RandomBatchSampler([5] * 10, 3, seed=1)
    loader = torch.utils.data.DataLoader(list(range(100, 110)), batch_sampler=s, collate_fn=list)
    assert len(loader) == 4
    assert list(loader) == [[100 + i for i in batch] for batch in s]


def test_accepts_numpy_and_does_not_mutate_it():
    lengths = np.array([3, 1, 2, 5], dtype=np.int32)
    s = RandomBatchSampler(lengths, 2)
    assert sorted(i for b in s for i in b) == [0, 1, 2, 3]
    lengths[0] = 99  # the sampler keeps its own copy
    assert s.lengths[0] == 3
    assert list(lengths) == [99, 1, 2, 5]


@pytest.mark.parametrize(
    ("args", "kwargs", "option"),
    [
        (([1, 2], 0), {}, "batch_size"),
        (([], 2), {}, "lengths: empty"),
        (([1, -1], 2), {}, "lengths"),
        (([[1, 2]], 2), {}, "lengths"),
        (([1.5, 2], 2), {}, "lengths"),
        (([1, 2], 2), {"rank": 2, "num_replicas": 2}, "rank"),
        (([1, 2], 2), {"rank": -1}, "rank"),
        (([1, 2], 2), {"num_replicas": 0}, "num_replicas"),
        (([1, 2], 2), {"seed": -1}, "seed"),
    ],
)
def test_bad_input_names_the_option(args, kwargs, option):
    with pytest.raises(MtlError, match=option):
        RandomBatchSampler(*args, **kwargs)


def test_bad_epoch_and_start_name_the_option():
    s = RandomBatchSampler([1, 2, 3], 2)
    with pytest.raises(MtlError, match="epoch"):
        s.set_epoch(-1)
    with pytest.raises(MtlError, match="epoch"):
        s.epoch_batches(-1)
    with pytest.raises(MtlError, match="start"):
        s.set_start(3)


def test_accepts_a_datasets_column_and_a_tensor():
    datasets = pytest.importorskip("datasets")
    column = datasets.Dataset.from_dict({"length": [4, 2, 9]})["length"]
    for lengths in (column, torch.tensor([4, 2, 9]), range(3)):
        s = RandomBatchSampler(lengths, 2)
        assert len(s) == 2 and sorted(i for b in s for i in b) == [0, 1, 2]
