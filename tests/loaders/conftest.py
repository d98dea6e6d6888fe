"""Tiny in-memory tasks for the composite loader tests: plain DataLoaders over dict examples."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pytest
import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader, Dataset

from mtl.builders.loaders import build_composite_loader
from tests.conftest import compose_config


class ToyDataset(Dataset):
    """Example i: input_ids of length 1 + (i mod 4), its label, and its example id."""

    def __init__(self, n: int, kind: str) -> None:
        self.n, self.kind = n, kind

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        length = 1 + i % 4
        label = {
            "class": torch.tensor(i % 3),
            "tokens": torch.arange(length) + i,  # token tagging: one label per token
            "regression": torch.tensor(i / 2, dtype=torch.float32),
        }[self.kind]
        return {"input_ids": torch.full((length,), 5 + i), "labels": label, "example_id": i}


class ToyBatchSampler:
    """Shuffled batches from np.random.default_rng([seed, epoch]); records its set_epoch calls."""

    def __init__(self, n: int, batch_size: int, seed: int = 0) -> None:
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.epoch = 0
        self.epochs_set: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.epochs_set.append(epoch)

    def __len__(self) -> int:
        return -(-self.n // self.batch_size)

    def batches(self) -> list[list[int]]:
        perm = np.random.default_rng([self.seed, self.epoch]).permutation(self.n).tolist()
        return [perm[i : i + self.batch_size] for i in range(0, self.n, self.batch_size)]

    def __iter__(self):
        return iter(self.batches())


class ResumableToyBatchSampler(ToyBatchSampler):
    """Also has set_start(k): the next iteration skips its first k batches, without data."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.start = 0
        self.starts_set: list[int] = []

    def set_start(self, k: int) -> None:
        self.start = k
        self.starts_set.append(k)

    def __iter__(self):
        start, self.start = self.start, 0
        return iter(self.batches()[start:])


def collate(task: str, kind: str, pad_token_id: int = 0) -> Callable[[list[dict]], dict]:
    def collate_fn(examples: list[dict]) -> dict:
        length = max(len(e["input_ids"]) for e in examples)
        input_ids = torch.full((len(examples), length), pad_token_id)
        mask = torch.zeros_like(input_ids)
        for row, e in enumerate(examples):
            input_ids[row, : len(e["input_ids"])] = e["input_ids"]
            mask[row, : len(e["input_ids"])] = 1
        if kind == "tokens":
            labels = torch.full_like(input_ids, -100)
            for row, e in enumerate(examples):
                labels[row, : len(e["labels"])] = e["labels"]
        else:
            labels = torch.stack([e["labels"] for e in examples])
        return {
            "input_ids": input_ids,
            "attention_mask": mask,
            "labels": labels,
            "task": task,
            "example_ids": torch.tensor([e["example_id"] for e in examples]),
        }

    return collate_fn


def toy_task(
    name: str,
    n: int,
    batch_size: int = 2,
    kind: str = "class",
    resumable: bool = False,
    pad_token_id: int = 0,
) -> DataLoader:
    """A DataLoader over n toy examples; the sampler seed differs per task name."""
    sampler_class = ResumableToyBatchSampler if resumable else ToyBatchSampler
    sampler = sampler_class(n, batch_size, seed=sum(map(ord, name)))
    return DataLoader(
        ToyDataset(n, kind), batch_sampler=sampler, collate_fn=collate(name, kind, pad_token_id)
    )


def toy_tasks(sizes: dict[str, int], batch_size: int = 2, **kwargs) -> dict[str, DataLoader]:
    """One toy task per entry of `sizes` (task name -> number of examples)."""
    return {name: toy_task(name, n, batch_size, **kwargs) for name, n in sizes.items()}


def batch_key(batch: dict) -> tuple:
    """What identifies a yielded batch: its task(s) and example ids, in order."""
    if "task_ids" in batch:
        return tuple(batch["task_ids"].tolist()), tuple(batch["example_ids"].tolist())
    return batch["task"], tuple(batch["example_ids"].tolist())


def epoch_keys(loader) -> list[tuple]:
    return [batch_key(batch) for batch in loader]


@pytest.fixture(scope="session")
def make_tasks():
    return toy_tasks


@pytest.fixture(scope="session")
def keys():
    return epoch_keys


@pytest.fixture(scope="session")
def make_task():
    return toy_task


def real_tasks(
    sizes: dict[str, int],
    batch_size: int = 2,
    num_workers: int = 0,
    persistent_workers: bool = False,
) -> dict[str, DataLoader]:
    """Toy tasks batched by mtl.samplers.RandomBatchSampler (which has set_start)."""
    samplers = pytest.importorskip("mtl.samplers")
    return {
        name: DataLoader(
            ToyDataset(n, "class"),
            batch_sampler=samplers.RandomBatchSampler([1] * n, batch_size, seed=len(name) + n),
            collate_fn=collate(name, "class"),
            num_workers=num_workers,
            persistent_workers=persistent_workers,
        )
        for name, n in sizes.items()
    }


@pytest.fixture(scope="session")
def make_real_tasks():
    return real_tasks


@functools.cache
def loader_node(name: str) -> DictConfig:
    """The `loader` node of the real config composed with `loader=<name>`."""
    return compose_config(f"loader={name}").loader


def configured_loader(name: str, loaders: dict, seed: int = 0, **options):
    """The composite loader `loader=<name>` as training builds it: the composed node with
    `options` set as `loader.<key>=...` overrides set them, then `build_composite_loader`."""
    node = OmegaConf.merge(loader_node(name), options)
    return build_composite_loader(node, loaders, seed=seed, pad_token_id=0)


@pytest.fixture(scope="session")
def build_loader():
    return configured_loader
