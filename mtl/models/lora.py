"""`model.peft`: parameter-efficient training of the shared encoder with peft (LoRA by default).

    model.peft=lora                                   LoRA with the defaults below
    model.peft={r: 16, alpha: 32, target_modules: [query, key, value]}
    model.peft={_target_: peft.IA3Config, target_modules: [...], feedforward_modules: [...]}

LoRA's defaults: r 8, alpha 16, dropout 0.05, and the attention projections peft targets for the
encoder's model type (`query`/`value` for BERT-like encoders, `q_proj`/`v_proj` for Qwen2 and
Llama). One adapter is shared by every task; the encoder's own weights are frozen and the task
heads are trained whole. Every part that asks the model which parameters train (the optimizer,
the balancers' per-task gradients, diagnostics) then sees the adapter's and the heads'.

An export holds the encoder with the adapter merged into its weights (`merged_model`): a standard
transformers model that needs no peft to load.

peft is an extra (`pip install "mtl-train[peft]"`); without it, `model.peft` is one line naming
that command.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from typing import Any

from torch import nn

from mtl.errors import MtlError, import_target

INSTALL = 'install it with: pip install "mtl-train[peft]"'
LORA = {"r": 8, "alpha": 16, "dropout": 0.05, "target_modules": None}


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
    if isinstance(spec, Mapping) and "_target_" in spec:
        return  # its own options: the peft config class checks them when it is made
    if isinstance(spec, str):
        if spec != "lora":
            raise MtlError(
                f"model.peft={spec} is not a method mtl knows; use model.peft=lora, or "
                "model.peft={_target_: <a peft config class>, ...} for any other"
            )
        return
    unknown = sorted(set(spec) - set(LORA))
    if unknown:
        raise MtlError(
            f"model.peft.{unknown[0]} is not a LoRA option; use {', '.join(LORA)} (or "
            "model.peft={_target_: peft.LoraConfig, ...} for peft's own options)"
        )
    given = {**LORA, **spec}
    if not isinstance(given["r"], int) or given["r"] < 1:
        raise MtlError(f"model.peft.r={given['r']} must be an integer >= 1")
    if not given["alpha"] > 0:
        raise MtlError(f"model.peft.alpha={given['alpha']} must be > 0")
    if not 0 <= given["dropout"] < 1:
        raise MtlError(f"model.peft.dropout={given['dropout']} must be in [0, 1)")


def peft_config(spec: Mapping[str, Any] | str) -> Any:
    """The peft config `model.peft` names: LoraConfig from `lora` or LORA's keys, or the class
    its `_target_` names made with its other keys."""
    check_peft(spec)
    if isinstance(spec, Mapping) and "_target_" in spec:
        target = import_target(spec["_target_"], "model.peft._target_")
        options = {k: v for k, v in spec.items() if k != "_target_"}
        try:
            return target(**options)
        except (TypeError, ValueError) as err:
            raise MtlError(f"model.peft: {str(err).splitlines()[0]}") from None
    given = {**LORA, **({} if isinstance(spec, str) else spec)}
    targets = given["target_modules"]
    return peft_module().LoraConfig(
        r=given["r"],
        lora_alpha=given["alpha"],
        lora_dropout=given["dropout"],
        target_modules=list(targets) if targets is not None else None,
    )


def add_adapter(encoder: nn.Module, config: Any) -> nn.Module:
    """The encoder with one trainable adapter (`config`: a peft config) and its own weights
    frozen; a target that matches none of its modules is one line."""
    peft = peft_module()
    try:
        with warnings.catch_warnings():  # peft asks a deprecated transformers property
            warnings.simplefilter("ignore", FutureWarning)
            return peft.get_peft_model(encoder, config)
    except ValueError as err:  # targets not found, or no default targets for this model type
        linear = {n.rsplit(".", 1)[-1] for n, m in encoder.named_modules() if type(m) is nn.Linear}
        raise MtlError(
            f"model.peft: {str(err).split('. ')[0]}; the encoder's linear layers are "
            f"{', '.join(sorted(linear))}: name those to adapt with model.peft.target_modules"
        ) from None


def is_adapted(encoder: nn.Module) -> bool:
    return hasattr(encoder, "peft_config") and hasattr(encoder, "merge_and_unload")


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


def merged_model(model: nn.Module) -> nn.Module:
    """`model` itself when its encoder carries no adapter; else a copy whose encoder has the
    adapter merged into its weights."""
    if not is_adapted(model.encoder):
        return model
    merged = copy.deepcopy(model)  # the copy's own encoder to merge into; heads are small
    merged.encoder = merged.encoder.merge_and_unload()
    return merged
