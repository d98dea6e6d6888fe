"""The chosen tasks, tokenized, and their tokenizer (`build_tasks`)."""

from __future__ import annotations

import sys
from dataclasses import replace

from mtl.config import Settings
from mtl.data import Task, build_task_from_config, load_tokenizer
from mtl.errors import MtlError, env_rank
from mtl.models import encoder_config
from mtl.task_types import task_type_class


def build_tasks(
    settings: Settings, seed: int, labels: dict[str, list[str] | None] | None = None
) -> tuple[dict[str, Task], object]:
    """Tokenized splits of every chosen task, and the tokenizer. With `labels` (each task's
    label names as a run trained with them: its checkpoints' `mtl_run.json`), no data is read:
    the tasks hold no splits, only what a trained model needs (export, prediction).

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
        if labels is not None:
            task_type = task_type_class(config.type, name)(name, config)
            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
            tasks[name] = Task(name, config.type, task_type, {}, labels[name], pad)
            continue
        tasks[name] = build_task_from_config(
            name, config, tokenizer, seed=seed, max_examples=settings.data.max_examples
        )
    return tasks, tokenizer
