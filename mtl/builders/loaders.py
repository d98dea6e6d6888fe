"""Per-task loaders over the train splits (batched by the configured sampler) and the composite
loader that mixes them (`loader=`)."""

from __future__ import annotations

import inspect

import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from mtl.builders.instantiate import build, build_call
from mtl.config import Settings
from mtl.config.checks import import_target
from mtl.data import Task, task_loader
from mtl.errors import MtlError
from mtl.loaders import CompositeLoader
from mtl.samplers.base import BaseBatchSampler


def build_train_loaders(
    tasks: dict[str, Task],
    settings: Settings,
    sampler_cfg: DictConfig,
    *,
    seed: int,
    num_replicas: int = 1,
    rank: int = 0,
) -> dict[str, DataLoader]:
    """One DataLoader per task over its train split, batched by the configured sampler.

    The sampler is built as `sampler(lengths, batch_size, seed=, num_replicas=, rank=)`. Each
    task's sampler gets its own seed (seed + 1000 * task position), so equally sized tasks are
    not shuffled alike; every rank builds the same global order and takes its own shard.
    """
    if not sampler_cfg.get("_partial_", False):
        raise MtlError(
            f"sampler: {sampler_cfg.get('_target_')} is built per task (with its lengths and "
            "batch size), so its config needs the line `_partial_: true`; add it to the YAML"
        )
    make_sampler = build(sampler_cfg, "sampler", BaseBatchSampler)
    data = settings.data
    loaders = {}
    for i, (name, task) in enumerate(tasks.items()):
        task_seed = seed + 1000 * i
        sampler = build_call(
            make_sampler,
            "sampler",
            task.train["length"],
            settings.tasks[name].batch_size,
            seed=task_seed,
            num_replicas=num_replicas,
            rank=rank,
        )
        loaders[name] = task_loader(
            task,
            sampler,
            pad_to_multiple_of=data.pad_to_multiple_of,
            num_workers=data.num_workers,
            pin_memory=data.pin_memory,
            persistent_workers=data.persistent_workers,
            generator=torch.Generator().manual_seed(task_seed),
        )
    return loaders


def build_composite_loader(
    loader_cfg: DictConfig,
    loaders: dict[str, DataLoader],
    *,
    seed: int,
    pad_token_id: int,
    epochs: int | None = None,
):
    """The configured mixing strategy over the per-task loaders (always a composite loader,
    also for one task, so that its state and counters work the same way). The class gets the
    loaders and `seed`, and `pad_token_id` and the run's `epochs` (for mixtures that move over
    the run) when its constructor has those parameters."""
    options: dict = {"seed": seed}
    target = import_target(loader_cfg._target_, "loader._target_", CompositeLoader)
    parameters = inspect.signature(target).parameters
    if "pad_token_id" in parameters:
        options["pad_token_id"] = pad_token_id
    if "epochs" in parameters:
        options["epochs"] = epochs
    return build(loader_cfg, "loader", CompositeLoader, loaders, **options)
