"""Where config nodes become objects: tasks, per-task loaders, the composite loader, the model.

Every pluggable part is named in its config: samplers, composite loaders and heads by
`_target_`, task types by `type:` (a built-in name or an import path, `mtl.task_types`),
metrics by name or import path. Nothing here lists the choices.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import replace

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from mtl.config import Settings
from mtl.config.checks import check_arguments, import_target
from mtl.data import Task, build_task_from_config, load_tokenizer, task_loader
from mtl.errors import MtlError
from mtl.models import MultiTaskModel, encoder_config, load_encoder_and_pooler
from mtl.models.heads import init_poolers
from mtl.training.checkpoint import trained_weights
from mtl.training.distributed import env_rank


def build_tasks(settings: Settings, seed: int) -> tuple[dict[str, Task], object]:
    """Tokenized splits of every chosen task, and the tokenizer.

    A task `max_length` above what the encoder can take (its position embeddings, or the
    tokenizer's `model_max_length`) is lowered to that limit with a one-line warning."""
    m = settings.model
    try:
        tokenizer = load_tokenizer(m.tokenizer or m.name_or_path)
    except MtlError as err:
        key = "model.tokenizer" if m.tokenizer else "model.name_or_path"
        raise MtlError(f"{key}: {err}") from None
    limit = encoder_config(m.name_or_path, dict(m.config)).max_position_embeddings
    if 0 < tokenizer.model_max_length < limit:
        limit = tokenizer.model_max_length
    tasks = {}
    for name, config in settings.tasks.items():
        if config.max_length > limit:
            if env_rank() == 0:
                print(
                    f"mtl: warning: task {name!r}: max_length {config.max_length} is more than "
                    f"the encoder takes ({limit} tokens); using {limit}",
                    file=sys.stderr,
                )
            config = replace(config, max_length=limit)
        tasks[name] = build_task_from_config(
            name, config, tokenizer, seed=seed, max_examples=settings.data.max_examples
        )
    return tasks, tokenizer


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
    make_sampler = build(sampler_cfg, "sampler")
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
    loader_cfg: DictConfig, loaders: dict[str, DataLoader], *, seed: int, pad_token_id: int
):
    """The configured mixing strategy over the per-task loaders (always a composite loader,
    also for one task, so that its state and counters work the same way). The class gets the
    loaders and `seed`, and `pad_token_id` when its constructor has that parameter."""
    options = {"seed": seed}
    parameters = inspect.signature(import_target(loader_cfg._target_, "loader._target_")).parameters
    if "pad_token_id" in parameters:
        options["pad_token_id"] = pad_token_id
    return build(loader_cfg, "loader", loaders, **options)


def build(node: DictConfig, group: str, *args, **kwargs):
    """`instantiate`, with a bad option reported as one line naming the config group: a
    `_target_` that does not import, a key its class does not take, a value it refuses."""
    check_arguments(node, import_target(node.get("_target_"), f"{group}._target_"), group)
    try:
        return instantiate(node, *args, **kwargs)
    except InstantiationException as err:
        raise _one_line(err.__cause__ or err, group) from None


def build_call(factory, group: str, *args, **kwargs):
    """Call a partial from `build` (a sampler factory), with the same one-line errors."""
    try:
        return factory(*args, **kwargs)
    except (MtlError, TypeError, ValueError) as err:
        raise _one_line(err, group) from None


def _one_line(cause: BaseException, group: str) -> MtlError:
    if isinstance(cause, MtlError):
        return MtlError(f"{group}: {cause}")
    detail = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
    return MtlError(f"{group}: {detail}; see conf/{group}/ for the options")


def build_model(settings: Settings, tasks: dict[str, Task]) -> MultiTaskModel:
    """The encoder and each task's head (from its task type, or its config's `head`)."""
    m = settings.model
    encoder, pooler = load_encoder_and_pooler(
        m.name_or_path, random_init=m.random_init, config=dict(m.config), family=m.family
    )
    hidden = encoder.config.hidden_size
    heads = {
        name: task.task_type.make_head(hidden, task.num_labels, m.head_dropout)
        for name, task in tasks.items()
    }
    if pooler is not None:
        init_poolers(heads, pooler.weight, pooler.bias)
    model = MultiTaskModel(encoder, heads, pack=m.pack)
    if m.init_from:
        init_from(model, m.init_from)
    return model


def init_from(model: MultiTaskModel, path: str) -> None:
    """Load a trained model's encoder and the heads of the tasks both share (the MT-DNN
    workflow: train on many tasks, then fine-tune on one); other heads stay fresh."""
    state, source = trained_weights(path)
    own = model.state_dict()
    missing = [k for k in own if k.startswith("encoder.") and k not in state]
    if missing:
        raise MtlError(
            f"model.init_from={path}: its encoder differs from model's ({missing[0]!r} is "
            "missing); use the same model settings as the run you start from"
        )
    shared = sorted({k.split(".")[1] for k in state if k.startswith("heads.")} & set(model.heads))
    keep = {k: v for k, v in state.items() if k.startswith("encoder.")}
    keep |= {k: v for k, v in state.items() if k.split(".")[:2] in [["heads", t] for t in shared]}
    for key, value in keep.items():
        if own[key].shape != value.shape:
            raise MtlError(
                f"model.init_from={path}: {key} has shape {tuple(value.shape)} there and "
                f"{tuple(own[key].shape)} here (different labels or model); rename the task "
                "to give it a fresh head, or match the model settings"
            )
    model.load_state_dict(keep, strict=False)
    fresh = sorted(set(model.heads) - set(shared))
    if env_rank() == 0:
        print(
            f"mtl: initialised from {source}: encoder and heads {shared or 'none'}; "
            f"fresh heads {fresh or 'none'}",
            file=sys.stderr,
        )
