"""Where config nodes become objects: tasks, per-task loaders, the composite loader, the model.

`TASK_TYPES` maps a task type to its head and dev metric; a new task type is one entry here
(plus its collator in `mtl.data`). Loader and sampler classes come from the config's
`_target_`, so the folder listings `conf/loader/` and `conf/sampler/` are their registry.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from mtl.config import Settings
from mtl.data import Task, build_task, load_tokenizer, make_collator, task_dataset
from mtl.errors import MtlError
from mtl.metrics import Accuracy, Pearson, TokenF1
from mtl.models import (
    MultiTaskModel,
    RegressionHead,
    SequenceClassificationHead,
    TokenClassificationHead,
    load_encoder,
)


@dataclass(frozen=True)
class TaskType:
    head: type
    metric: type


TASK_TYPES = {
    "sequence_classification": TaskType(SequenceClassificationHead, Accuracy),
    "token_classification": TaskType(TokenClassificationHead, TokenF1),
    "regression": TaskType(RegressionHead, Pearson),
}


def build_tasks(settings: Settings, seed: int) -> tuple[dict[str, Task], object]:
    """Tokenized train/dev datasets of every chosen task, and the tokenizer."""
    tokenizer = load_tokenizer(settings.model.tokenizer or settings.model.name_or_path)
    tasks = {}
    for name, t in settings.tasks.items():
        tasks[name] = build_task(
            name,
            type=t.type,
            source=dict(t.source),
            tokenizer=tokenizer,
            text_column=t.text_column,
            label_column=t.label_column,
            max_length=t.max_length,
            label_names=t.label_names,
            dev_fraction=t.dev_fraction,
            seed=seed,
            max_examples=settings.data.max_examples,
        )
    return tasks, tokenizer


def build_train_loaders(
    tasks: dict[str, Task],
    settings: Settings,
    sampler_cfg: DictConfig,
    tokenizer,
    *,
    seed: int,
    num_replicas: int = 1,
    rank: int = 0,
) -> dict[str, DataLoader]:
    """One DataLoader per task over its train split, batched by the configured sampler.

    Each task's sampler gets its own seed (seed + task position), so equally sized tasks are
    not shuffled alike; every rank builds the same global order and takes its own shard.
    """
    make_sampler = build(sampler_cfg, "sampler")
    data = settings.data
    loaders = {}
    for i, (name, task) in enumerate(tasks.items()):
        sampler = make_sampler(
            task.train["length"],
            settings.tasks[name].batch_size,
            seed=seed + 1000 * i,
            num_replicas=num_replicas,
            rank=rank,
        )
        loaders[name] = DataLoader(
            task_dataset(task, "train"),
            batch_sampler=sampler,
            collate_fn=make_collator(
                task.type,
                name,
                pad_token_id=tokenizer.pad_token_id,
                pad_to_multiple_of=data.pad_to_multiple_of,
            ),
            num_workers=data.num_workers,
            pin_memory=data.pin_memory,
            persistent_workers=data.persistent_workers and data.num_workers > 0,
            # Its own generator: starting an iterator then leaves the global RNG (dropout) alone,
            # so a resumed run draws the same dropout masks as an uninterrupted one.
            generator=torch.Generator().manual_seed(seed + 1000 * i),
        )
    return loaders


def build_composite_loader(
    loader_cfg: DictConfig, loaders: dict[str, DataLoader], *, seed: int, pad_token_id: int
):
    """The configured mixing strategy over the per-task loaders (always a composite loader,
    also for one task, so that its state and counters work the same way)."""
    options = {"seed": seed}
    if loader_cfg._target_.endswith("MixupLoader"):
        options["pad_token_id"] = pad_token_id
    return build(loader_cfg, "loader", loaders, **options)


def build(node: DictConfig, group: str, *args, **kwargs):
    """`instantiate`, with a bad option reported as one line naming the config group."""
    try:
        return instantiate(node, *args, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, MtlError):
            raise MtlError(f"{group}: {cause}") from None
        detail = str(cause or err).splitlines()[0]
        raise MtlError(f"{group}: {detail}; see conf/{group}/ for the options") from None


def build_model(settings: Settings, tasks: dict[str, Task]) -> MultiTaskModel:
    m = settings.model
    encoder = load_encoder(m.name_or_path, random_init=m.random_init, config=dict(m.config))
    hidden = encoder.config.hidden_size
    heads = {
        name: TASK_TYPES[task.type].head(hidden, task.num_labels, dropout=m.head_dropout)
        for name, task in tasks.items()
    }
    return MultiTaskModel(encoder, heads, loss_weights=m.loss_weights)


def build_metrics(tasks: dict[str, Task]) -> dict:
    return {
        name: TASK_TYPES[task.type].metric(task.num_labels, task.label_names)
        for name, task in tasks.items()
    }
