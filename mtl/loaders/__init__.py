"""Composite loaders: mix the batches of several task loaders into one stream of steps.

`build_loader(name, loaders, **options)` builds one by name (the `loader=` config choice):
sequential, round_robin, random, mixup. See each class for its exact epoch contract.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mtl.errors import MtlError
from mtl.loaders.base import CompositeLoader
from mtl.loaders.dry_run import dry_run
from mtl.loaders.mixup import MixupLoader
from mtl.loaders.random import RandomLoader
from mtl.loaders.round_robin import RoundRobinLoader
from mtl.loaders.sequential import SequentialLoader

LOADERS: dict[str, type[CompositeLoader]] = {
    "sequential": SequentialLoader,
    "round_robin": RoundRobinLoader,
    "random": RandomLoader,
    "mixup": MixupLoader,
}


def loader_class(name: str) -> type[CompositeLoader]:
    """The composite loader class called `name`, or MtlError listing the valid names."""
    if name not in LOADERS:
        raise MtlError(f"loader: unknown name {name!r}; use one of {', '.join(LOADERS)}")
    return LOADERS[name]


def build_loader(name: str, loaders: Mapping[str, Iterable], **options: Any) -> Iterable:
    """The composite loader `name` over `loaders` (task name -> DataLoader) with `options`.

    With a single task the options are still checked, but that task's loader is returned
    unchanged: there is nothing to mix, and it keeps its own `len`, `set_epoch` and resume."""
    composite = loader_class(name)(loaders, **options)
    if len(loaders) == 1:
        return next(iter(loaders.values()))
    return composite


__all__ = [
    "LOADERS",
    "CompositeLoader",
    "MixupLoader",
    "RandomLoader",
    "RoundRobinLoader",
    "SequentialLoader",
    "build_loader",
    "dry_run",
    "loader_class",
]
