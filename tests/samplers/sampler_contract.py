"""The sampler contract in the form older tests call it; the checks live in `mtl.testing`."""

from mtl.testing import check_resume
from mtl.testing import check_sharding as check_shards


def check_sharding(make, lengths, options, num_replicas, plain):
    """Equal len on every rank; sharding only adds padding batches repeated from the start."""
    assert plain == [[int(i) for i in b] for b in make(lengths, **options)]

    def build(replicas, rank):
        return make(lengths, **options, num_replicas=replicas, rank=rank)

    check_shards(build, num_replicas, epoch=0, where=f"{len(lengths)} examples")


def check_deterministic_and_resumable(make, lengths, options, data=None, integers=None):
    """Same seed and epoch, same batches; set_start(k) yields the rest once, then all again
    (for every k; `data` and `integers` are no longer needed)."""
    s, twin = (make(lengths, **options, num_replicas=2, rank=1) for _ in range(2))
    s.set_epoch(2)
    twin.set_epoch(2)
    full = list(s)
    assert full == [b.tolist() for b in s.epoch_batches(2)] == list(twin)
    check_resume(s, epoch=2, where=f"{len(lengths)} examples")
