"""`model.peft`: parameter-efficient training of the shared encoder with peft (LoRA by default).

    model.peft=lora                                   LoRA with the defaults below
    model.peft={r: 16, alpha: 32, target_modules: [query, key, value]}
    model.peft={_target_: peft.IA3Config, target_modules: [...], feedforward_modules: [...]}
    model.peft={per_task: true}                       one LoRA adapter per task (any of the above)

LoRA's defaults: r 8, alpha 16, dropout 0.05, and the attention projections peft targets for the
encoder's model type (`query`/`value` for BERT-like encoders, `q_proj`/`v_proj` for Qwen2 and
Llama). The encoder's own weights are frozen and the task heads are trained whole. By default
one adapter is shared by every task: its parameters are shared ones. With `per_task: true` each
task has an adapter of its own, named by the task, on the one frozen encoder: its parameters are
that task's (`MultiTaskModel.owner`), as its head's are, and a batch runs through the adapter
of its task (a mixed batch: each task's rows through its own, one encoder call per task, as peft
trains one adapter per call). Every part that asks the model which parameters train, and whose
they are (the optimizer, the balancers' per-task gradients, diagnostics, checkpoints), sees the
adapters'.

An export holds the adapters in peft's format, or merged into the encoder's weights
(`merge_adapter`): a standard transformers model that needs no peft to load.

peft is an extra (`pip install "mtl-train[peft]"`); without it, `model.peft` is one line naming
that command.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from mtl.errors import MtlError, import_target
from mtl.values import is_int, is_number

INSTALL = 'install it with: pip install "mtl-train[peft]"'
LORA = {"r": 8, "alpha": 16, "dropout": 0.05, "target_modules": None}
PER_TASK = "per_task"  # model.peft's key for one adapter per task, with any method


def peft_module() -> Any:
    try:
        import peft
    except ImportError:
        raise MtlError(
            f"model.peft needs the peft package, which is not installed; {INSTALL}"
        ) from None
    return peft


def check_peft(spec: Any) -> None:
    """`model.peft` (None, `lora`, LoRA's options, or a peft config by `_target_`), checked
    before a run starts: a bad value, or peft not installed, is one line."""
    if spec is None:
        return
    peft_module()
    if isinstance(spec, Mapping) and not isinstance(spec.get(PER_TASK, False), bool):
        raise MtlError(f"model.peft.per_task={spec[PER_TASK]} must be true or false")
    if isinstance(spec, Mapping) and "_target_" in spec:
        return  # its own options: the peft config class checks them when it is made
    if isinstance(spec, str):
        if spec != "lora":
            raise MtlError(
                f"model.peft={spec} is not a method mtl knows; use model.peft=lora, or "
                "model.peft={_target_: <a peft config class>, ...} for any other"
            )
        return
    unknown = sorted(set(spec) - {*LORA, PER_TASK})
    if unknown:
        raise MtlError(
            f"model.peft.{unknown[0]} is not a LoRA option; use {', '.join([*LORA, PER_TASK])} (or "
            "model.peft={_target_: peft.LoraConfig, ...} for peft's own options)"
        )
    given = {**LORA, **{k: v for k, v in spec.items() if k != PER_TASK}}
    r, alpha, dropout = given["r"], given["alpha"], given["dropout"]
    if not is_int(r) or r < 1:
        raise MtlError(f"model.peft.r={r!r} must be an integer >= 1")
    if not is_number(alpha) or not 0 < alpha < math.inf:
        raise MtlError(f"model.peft.alpha={alpha!r} must be a number > 0")
    if not is_number(dropout) or not 0 <= dropout < 1:
        raise MtlError(f"model.peft.dropout={dropout!r} must be a number in [0, 1)")
    targets = given["target_modules"]
    names = [targets] if isinstance(targets, str) else targets
    if names is not None and (
        not isinstance(names, Sequence) or not names or not all(isinstance(n, str) for n in names)
    ):
        raise MtlError(
            f"model.peft.target_modules={targets!r} must be a module name or a list of them "
            "(query, [query, value]), or null for peft's defaults"
        )


def per_task(spec: Any) -> bool:
    """Whether `model.peft` asks for one adapter per task (`per_task: true`)."""
    return isinstance(spec, Mapping) and bool(spec.get(PER_TASK, False))


def peft_config(spec: Mapping[str, Any] | str) -> Any:
    """The peft config `model.peft` names: LoraConfig from `lora` or LORA's keys, or the class
    its `_target_` names made with its other keys (`per_task` aside)."""
    check_peft(spec)
    if isinstance(spec, Mapping):
        spec = {k: v for k, v in spec.items() if k != PER_TASK}
    if isinstance(spec, Mapping) and "_target_" in spec:
        kind = peft_module().PeftConfig
        target = import_target(spec["_target_"], "model.peft._target_", kind)
        options = {k: v for k, v in spec.items() if k != "_target_"}
        try:
            return target(**options)
        except (TypeError, ValueError) as err:
            raise MtlError(f"model.peft: {str(err).splitlines()[0]}") from None
    given = {**LORA, **({} if isinstance(spec, str) else spec)}
    targets = given["target_modules"]
    if isinstance(targets, str):
        targets = [targets]  # a module's name (peft would read a lone string as a regex)
    return peft_module().LoraConfig(
        r=given["r"],
        lora_alpha=given["alpha"],
        lora_dropout=given["dropout"],
        target_modules=list(targets) if targets is not None else None,
    )


def add_adapter(encoder: nn.Module, config: Any, tasks: list[str] | None = None) -> nn.Module:
    """The encoder with one trainable adapter (`config`: a peft config), or with `tasks` one per
    task named by it (every one trainable, the first active), and its own weights frozen; a
    target that matches none of its modules is one line."""
    peft = peft_module()
    try:
        with warnings.catch_warnings():  # peft asks a deprecated transformers property
            warnings.simplefilter("ignore", FutureWarning)
            if not tasks:
                return peft.get_peft_model(encoder, config)
            adapted = peft.get_peft_model(encoder, config, adapter_name=tasks[0])
            for task in tasks[1:]:
                adapted.add_adapter(task, config)
            adapted.set_requires_grad(tasks, True)  # add_adapter leaves the others frozen
            return adapted
    except ValueError as err:  # targets not found, or no default targets for this model type
        linear = {n.rsplit(".", 1)[-1] for n, m in encoder.named_modules() if type(m) is nn.Linear}
        raise MtlError(
            f"model.peft: {str(err).split('. ')[0]}; the encoder's linear layers are "
            f"{', '.join(sorted(linear))}: name those to adapt with model.peft.target_modules"
        ) from None


def is_adapted(encoder: nn.Module) -> bool:
    return hasattr(encoder, "peft_config") and hasattr(encoder, "merge_and_unload")


def adapter_tasks(encoder: nn.Module) -> dict[str, str]:
    """{parameter name in `encoder`: the adapter it belongs to} for every adapter parameter
    (peft keeps them in its layers' per-adapter dicts: `lora_A.<adapter>.weight`, ...)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    owner = {}
    for prefix, layer in encoder.named_modules():
        if not isinstance(layer, BaseTunerLayer):
            continue
        for attr in layer.adapter_layer_names:
            for adapter, part in getattr(layer, attr).items():
                params = [("", part)] if isinstance(part, nn.Parameter) else part.named_parameters()
                for name, _ in params:
                    owner[".".join(filter(None, (prefix, attr, adapter, name)))] = adapter
    return owner


def use_adapter(encoder: nn.Module, name: str) -> None:
    """Make `name` the encoder's active adapter, every adapter's parameters left as trainable
    (or not) as they were (peft's `set_adapter` freezes the others)."""
    if encoder.active_adapter == name:
        return
    trainable = [(p, p.requires_grad) for p in encoder.parameters()]
    encoder.set_adapter(name)
    for param, requires_grad in trainable:
        param.requires_grad_(requires_grad)


def frozen_keys(model: nn.Module) -> set[str]:
    """The state-dict keys of the parameters that do not train, when the encoder carries an
    adapter: what a step checkpoint leaves out (the base model's own weights, which
    `model.name_or_path` holds); empty otherwise (a checkpoint holds every weight)."""
    if not is_adapted(model.encoder):
        return set()
    named = model.named_parameters(remove_duplicate=False)
    return {name for name, p in named if not p.requires_grad}


def without_frozen(model: nn.Module, state: dict) -> None:
    """Drop `frozen_keys(model)` from `state` in place (a prepared model's state may prefix its
    keys with `module.`)."""
    frozen = frozen_keys(model)
    for key in [k for k in state if k in frozen or k.removeprefix("module.") in frozen]:
        del state[key]


def merge_adapter(encoder: nn.Module, task: str | None = None) -> nn.Module:
    """The encoder with its adapter (`task`'s, where it has one per task) merged into its
    weights, no peft layer left (`MultiTaskModel.merged`)."""
    names = [task] if task is not None and task in encoder.peft_config else None
    if names:
        encoder.set_adapter(task)
    return encoder.merge_and_unload(adapter_names=names)


def base_digest(encoder: nn.Module) -> str:
    """The sha256 of an adapted encoder's frozen base weights (every parameter that is no
    adapter's, by name, dtype, shape and bytes): what its adapters were trained on, recorded in
    an export and in each checkpoint (`mtl_run.json`), checked when either is read back."""
    adapter = adapter_tasks(encoder)
    digest = hashlib.sha256()
    for name, param in sorted(encoder.named_parameters()):
        if name in adapter:
            continue
        tensor = param.detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
