"""From a `Task` split to a torch `DataLoader` of padded, self-describing batches."""

from __future__ import annotations

import signal

import torch
from torch.utils.data import DataLoader

from mtl.batching import TokenizedSplit
from mtl.data.tasks import Task
from mtl.errors import MtlError


def task_dataset(task: Task, split: str = "train") -> TokenizedSplit:
    """The torch-facing dataset of one split ("train", "dev", or "test" where given) of `task`."""
    if split not in task.splits:
        raise MtlError(
            f"task {task.name!r}: unknown split {split!r}; use one of {list(task.splits)}"
        )
    return task.task_type.dataset(task.splits[split])


def task_loader(
    task: Task,
    batch_sampler,
    split: str = "train",
    *,
    pad_to_multiple_of: int | None = None,
    num_workers: int = 0,
    pin_memory: bool = False,
    persistent_workers: bool = False,
    generator: torch.Generator | None = None,
) -> DataLoader:
    """A DataLoader over one split of `task`, batched by `batch_sampler` (any sampler of
    `mtl.samplers`, built over `task.<split>["length"]`), padded by the task's collator.

    Call `loader.batch_sampler.set_epoch(epoch)` before each epoch (and `set_start(k)` to resume
    mid-epoch); composite loaders do both. `generator`: the DataLoader's own RNG, so that
    starting an iterator leaves the global RNG (dropout) alone.
    """
    return DataLoader(
        task_dataset(task, split),
        batch_sampler=batch_sampler,
        collate_fn=task.collator(pad_to_multiple_of),
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=persistent_workers and num_workers > 0,
        generator=generator,
        worker_init_fn=ignore_ctrl_c if num_workers else None,
    )


def ignore_ctrl_c(worker_id: int) -> None:
    """In a DataLoader worker: Ctrl-C reaches the whole process group, and the training decides
    what it means (a checkpoint at the next step), so the worker goes on serving batches."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
