"""The multi-task model from the settings: the encoder, a head per task, and `model.init_from`."""

from __future__ import annotations

import sys

from mtl.builders.weights import trained_weights
from mtl.config import Settings
from mtl.data import Task
from mtl.errors import MtlError, env_rank
from mtl.models import MultiTaskModel, load_encoder_and_pooler
from mtl.models.heads import init_poolers
from mtl.models.lora import peft_config, per_task


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
    if m.peft is not None:  # after init_from: a trained model's weights, then the adapter
        model.add_adapters(peft_config(m.peft), per_task=per_task(m.peft))
    return model


def init_from(model: MultiTaskModel, path: str) -> None:
    """Load a trained model's encoder and the heads of the tasks both share (the MT-DNN
    workflow: train on many tasks, then fine-tune on one); other heads stay fresh."""
    state, source = trained_weights(path)
    if any(".base_model.model." in key for key in state):  # a model.peft run's weights
        raise MtlError(
            f"model.init_from={path}: that run trained an adapter (model.peft); start from its "
            "export with the adapter merged (mtl-export <run> <out> merge=true)"
        )
    own = model.state_dict()
    missing = [k for k in own if model.owner(k).task is None and k not in state]
    if missing:
        raise MtlError(
            f"model.init_from={path}: its encoder differs from model's ({missing[0]!r} is "
            "missing); use the same model settings as the run you start from"
        )
    shared = sorted({model.owner(k).task for k in state} - {None} & set(model.heads))
    keep = {k: v for k, v in state.items() if model.owner(k).task in (None, *shared)}
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
