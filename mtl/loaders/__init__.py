"""Composite loaders: mix the batches of several task loaders into one stream of steps.

`build_loader(name, loaders, **options)` builds one by its config name (`loader=<name>`):
sequential, round_robin, random, mixup, or any name under `conf/loader/`, whose `_target_`
names the class. See each class for its exact epoch contract, and `docs/extending.md` to write
your own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hydra.utils import get_class
from omegaconf import OmegaConf

from mtl.artifacts import config_dir
from mtl.errors import MtlError
from mtl.loaders.base import CompositeLoader
from mtl.loaders.dry_run import dry_run
from mtl.loaders.mixup import MixupLoader
from mtl.loaders.random import RandomLoader
from mtl.loaders.round_robin import RoundRobinLoader
from mtl.loaders.sequential import SequentialLoader


def loader_names() -> list[str]:
    """The loader options shipped with mtl (the files of `conf/loader/`)."""
    folder = config_dir() / "loader"
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def loader_class(name: str) -> type[CompositeLoader]:
    """The class `loader=<name>` selects: the `_target_` of `conf/loader/<name>.yaml`."""
    names = loader_names()
    if name not in names:
        raise MtlError(f"loader: unknown name {name!r}; use one of {', '.join(names)}")
    node = OmegaConf.load(str(config_dir() / "loader" / f"{name}.yaml"))
    return get_class(node._target_)


def build_loader(name: str, loaders: Mapping[str, Iterable], **options: Any) -> Iterable:
    """The composite loader `name` over `loaders` (task name -> DataLoader) with `options`.

    With a single task the options are still checked, but that task's loader is returned
    unchanged: there is nothing to mix, and it keeps its own `len`, `set_epoch` and resume."""
    composite = loader_class(name)(loaders, **options)
    if len(loaders) == 1:
        return next(iter(loaders.values()))
    return composite


__all__ = [
    "CompositeLoader",
    "MixupLoader",
    "RandomLoader",
    "RoundRobinLoader",
    "SequentialLoader",
    "build_loader",
    "dry_run",
    "loader_class",
    "loader_names",
]
