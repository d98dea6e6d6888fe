"""Whether a checkpoint is this run's: `describe` records a run's tasks, labels, model,
tokenizer and balancer in each checkpoint (`mtl_run.json`); `check_compatible` compares them, and
the heads' and encoder's shapes, with the run's model before anything is loaded; a mismatch is
one line that names what differs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from omegaconf import OmegaConf

from mtl.artifacts import RunLayout
from mtl.builders.weights import DESCRIPTION
from mtl.config import Settings
from mtl.errors import MtlError
from mtl.models.lora import base_digest, frozen_keys, is_adapted

DESCRIBED = ("tasks", "model", "tokenizer", "balancer")  # what `describe` records


def describe(settings: Settings, tasks: dict, tokenizer, model=None) -> dict:
    """What a checkpoint records of its run, to compare on resume: each task's type, the model,
    the tokenizer (its name and a hash of its vocabulary), the balancer's config (its state and
    optimizer parameters are its own) and each task's label names in id order (what an export
    or prediction of the run names its classes with, whatever the data files say later); with
    an adapter on `model`'s encoder, the digest of the frozen base it trains on (`base`: a step
    checkpoint leaves the base out, so a resume reads it from `model.name_or_path` again)."""
    m = settings.model
    vocab = sorted(tokenizer.get_vocab().items())
    base = {"base": base_digest(model.encoder)} if model and is_adapted(model.encoder) else {}
    return base | {
        "balancer": OmegaConf.to_container(settings.balancer, resolve=True),
        "tasks": {name: task.type for name, task in tasks.items()},
        "labels": {name: task.label_names for name, task in tasks.items()},
        "model": m.name_or_path or "(packaged MiniLM)",
        "tokenizer": {
            "name": m.tokenizer or m.name_or_path or "(packaged MiniLM)",
            "vocabulary": hashlib.sha256(json.dumps(vocab).encode()).hexdigest()[:16],
        },
    }


def check_compatible(checkpoint: str, model, description: dict, option: str) -> None:
    """One-line MtlError when `checkpoint` was trained with other tasks, heads or encoder than
    `model` (the unwrapped model of this run) and `description` (`describe`)."""
    folder = Path(checkpoint)
    layout = RunLayout.of_checkpoint(folder)
    run_of = layout.root if layout is not None else folder
    fix = (
        "resume with the config it was trained with, or start from its weights with a fresh "
        f"optimizer: model.init_from={run_of} instead of {option}"
    )
    theirs = _saved_description(folder, option)
    if theirs and "base" in theirs and theirs["base"] != description.get("base"):
        raise MtlError(
            f"{option}: the base model {description['model']} is not the one the checkpoint's "
            "adapters were trained on (its frozen weights' digest differs; a step checkpoint "
            "holds the adapters only); put that base back at model.name_or_path",
            all_ranks=True,
        )
    for key in (*DESCRIBED, "labels") if theirs is not None else ():
        if key in theirs and theirs[key] != description[key]:
            raise MtlError(
                f"{option}: the checkpoint was trained with {key} {_show(theirs[key])}, this run "
                f"has {_show(description[key])}; {fix}",
                all_ranks=True,
            )
    shapes = _saved_shapes(folder, option)
    if shapes is None:
        return
    here = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    for key in frozen_keys(model) - shapes.keys():  # model.peft: the base is not in a checkpoint
        del here[key]
    saved_tasks = sorted({model.owner(k).task for k in shapes} - {None})
    run_tasks = sorted({model.owner(k).task for k in here} - {None})
    if saved_tasks != run_tasks:
        raise MtlError(
            f"{option}: the checkpoint was trained with tasks {saved_tasks}, this run has "
            f"{run_tasks}; {fix}",
            all_ranks=True,
        )
    keys = shapes.keys() | here.keys()  # the shared parameters first, then the heads'
    for key in sorted(keys, key=lambda k: (model.owner(k).task is not None, k)):
        if shapes.get(key) != here.get(key):
            task, part = model.owner(key)
            what = "the encoder" if task is None else f"the {part} of task {task!r}"
            raise MtlError(
                f"{option}: {what} differs from the checkpoint's ({key}: {_shape(shapes, key)}"
                f" there, {_shape(here, key)} here); {fix}",
                all_ranks=True,
            )


def _saved_description(folder: Path, option: str) -> dict | None:
    """The checkpoint's `describe` (`mtl_run.json`); None when it has none (mtl 0.1.0 wrote
    none: the weights' shapes are still compared)."""
    path = folder / DESCRIPTION
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text())
        labels = {"labels": saved["labels"]} if "labels" in saved else {}  # mtl >= 0.3
        base = {"base": saved["base"]} if "base" in saved else {}
        return {key: saved[key] for key in DESCRIBED} | labels | base
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise unreadable(folder, option, err) from None


def _saved_shapes(folder: Path, option: str) -> dict[str, tuple] | None:
    from safetensors import safe_open

    path = folder / "model.safetensors"
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), "pt") as f:
            return {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}
    except Exception as err:  # safetensors raises its own error types for a damaged header
        raise unreadable(folder, option, err) from None


def unreadable(folder: Path, option: str, err: Exception) -> MtlError:
    """A checkpoint that cannot be loaded: a file damaged (its size right, its contents not)."""
    detail = (str(err).strip().splitlines() or [""])[-1][:200]
    return MtlError(
        f"{option}: checkpoint {folder} cannot be loaded ({type(err).__name__}: {detail}); "
        f"resume from an earlier one: trainer.resume={folder.parent}/step_N",
        all_ranks=True,
    )


def _shape(shapes: dict, key: str) -> str:
    return f"shape {shapes[key]}" if key in shapes else "absent"


def _show(value) -> str:
    if isinstance(value, dict) and "vocabulary" in value:
        return f"{value['name']!r} (vocabulary {value['vocabulary']})"
    if isinstance(value, dict):
        return "[" + ", ".join(f"{k} ({v})" for k, v in value.items()) + "]"
    return repr(value)
