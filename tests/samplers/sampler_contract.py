"""Checks every batch sampler's shared contract (sharding, determinism, resume) must pass."""

from collections import Counter


def check_sharding(make, lengths, options, num_replicas, plain):
    """Equal len on every rank; sharding only adds padding batches repeated from the start."""
    ranks = [
        make(lengths, **options, num_replicas=num_replicas, rank=rank)
        for rank in range(num_replicas)
    ]
    yielded = [list(s) for s in ranks]
    assert [len(b) for b in yielded] == [len(s) for s in ranks] == [len(ranks[0])] * num_replicas
    n_padding = -len(plain) % num_replicas
    padded = plain + [plain[i % len(plain)] for i in range(n_padding)] if plain else []
    assert Counter(tuple(b) for r in yielded for b in r) == Counter(tuple(b) for b in padded)


def check_deterministic_and_resumable(make, lengths, options, data, integers):
    """Same seed and epoch, same batches; set_start(k) yields the rest once, then all again."""
    s = make(lengths, **options, num_replicas=2, rank=1)
    s.set_epoch(2)
    full = list(s)
    assert full == [b.tolist() for b in s.epoch_batches(2)]
    twin = make(lengths, **options, num_replicas=2, rank=1)
    twin.set_epoch(2)
    assert list(twin) == full
    k = data.draw(integers(0, len(s)))
    s.set_start(k)
    assert list(s) == full[k:]
    assert list(s) == full
