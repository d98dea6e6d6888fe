"""Composite loaders: mix the batches of several task loaders into one stream of steps.

`loader=<name>` picks `conf/loader/<name>.yaml`, whose `_target_` names the class: sequential,
round_robin, random, mixup, or a class of your own. See each class for its exact epoch contract,
and `docs/extending.md` to write your own. May import `mtl.errors`, `mtl.artifacts` and
`mtl.batching` only.
"""

from mtl.loaders.base import CompositeLoader
from mtl.loaders.dry_run import dry_run
from mtl.loaders.mixup import MixupLoader
from mtl.loaders.random import RandomLoader
from mtl.loaders.round_robin import RoundRobinLoader
from mtl.loaders.sequential import SequentialLoader
from mtl.loaders.weighted import WeightedLoader

__all__ = [
    "CompositeLoader",
    "MixupLoader",
    "RandomLoader",
    "RoundRobinLoader",
    "SequentialLoader",
    "WeightedLoader",
    "dry_run",
]
