"""Reading an export folder back (`mtl-export`'s output): the model, tokenizer and tasks.

`mtl_tasks.json` is read as data: every task's type, head and metrics must be mtl's own
(`mtl.inference.trust`) unless the caller trusts the folder, before anything it names is imported.
It records the sha256 of each weights file (`digests`), checked before the weights are read: a
file changed after the export (even at the same size, with a valid header) is one line.

The export of a model.peft run (`peft` in `mtl_tasks.json`) holds adapters, not the encoder:
they go on the base model it names (`adapted_encoder`), which must be there: one line if not.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from mtl.artifacts import HEADS_FILE, TASKS_FILE, damaged, read_weights
from mtl.data.tokenizer import load_tokenizer
from mtl.errors import MtlError
from mtl.inference.trust import check_task
from mtl.models import MultiTaskModel, load_encoder_and_pooler
from mtl.models.lora import peft_module
from mtl.models.multitask import head_task, model_state
from mtl.quiet import quiet_libraries
from mtl.task_types import task_config, task_type_class

FORMAT = 1


@dataclass
class TaskInfo:
    """What prediction needs of one task: its type object, label names and config."""

    task_type: Any
    label_names: list[str] | None
    config: Any


@dataclass
class LoadedModel:
    """A trained multi-task model ready to predict: `model` (eval mode), `tokenizer`, `tasks`."""

    model: Any
    tokenizer: Any
    tasks: dict[str, TaskInfo]


def load_export(path: str | Path, *, trust_custom_code: bool = False) -> LoadedModel:
    """The model of an export folder (eval mode). Its `mtl_tasks.json` is read as data: a task
    type, head or metric that is not mtl's own is refused unless `trust_custom_code`."""
    folder = Path(path)
    try:
        meta = json.loads((folder / TASKS_FILE).read_text())
        spec = {name: (e["config"], e["head"]["class"]) for name, e in meta["tasks"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise MtlError(f"model={path}: {TASKS_FILE} is unreadable; export the run again") from None
    for name, (config, head_class) in spec.items():
        check_task(name, config, head_class, trust=trust_custom_code)
    check_digests(folder, meta.get("digests") or {})
    tokenizer = load_tokenizer(str(folder))
    encoder = adapted_encoder(folder, meta["peft"]) if "peft" in meta else export_encoder(folder)
    heads, tasks = {}, {}
    for name, entry in meta["tasks"].items():
        try:
            config = task_config(entry["config"], name)
            h = entry["head"]
            task_type = task_type_class(config.type, name)(name, config)
            heads[name] = task_type.make_head(h["hidden_size"], h["num_labels"], h["dropout"])
            tasks[name] = TaskInfo(task_type, entry["label_names"], config)
        except (TypeError, KeyError, ValueError) as err:
            raise MtlError(
                f"model={path}: task {name!r} in {TASKS_FILE} is malformed ({err}); export the "
                "run again"
            ) from None
    model = MultiTaskModel(encoder, heads)
    weights = read_weights(folder / HEADS_FILE, "export the run again")
    missing, unexpected = model.load_state_dict(model_state(weights), strict=False)
    missing = [k for k in missing if head_task(k) is not None]
    if missing or unexpected:
        raise MtlError(
            f"model={path}: {HEADS_FILE} does not match {TASKS_FILE} "
            f"({(missing or unexpected)[0]!r}); export the run again"
        )
    model.eval()
    return LoadedModel(model, tokenizer, tasks)


def file_digest(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_digests(folder: Path, digests: dict) -> None:
    """One line for a weights file whose sha256 is not the one its export recorded."""
    for name, recorded in digests.items():
        path = folder / str(name)
        if not path.is_file():
            raise MtlError(f"model={folder}: {name} is missing; export the run again")
        if file_digest(path) != recorded:
            raise MtlError(
                f"{path} is not the file the export wrote (its sha256 is not the one "
                f"{TASKS_FILE} records: changed or damaged since); export the run again"
            )


def export_encoder(folder: Path):
    """The encoder of an export folder, which was saved without its pooler (each head has its
    own): transformers' load report is kept quiet for that, and any other weight missing from
    the folder is a one-line error."""
    from safetensors import SafetensorError
    from transformers import AutoModel

    try:
        with quiet_libraries():
            encoder, info = AutoModel.from_pretrained(str(folder), output_loading_info=True)
    except SafetensorError as err:
        raise damaged(folder / "model.safetensors", err, "export the run again") from None
    except (OSError, ValueError) as err:
        raise MtlError(
            f"model={folder}: its encoder cannot be read ({type(err).__name__}); export the run "
            "again"
        ) from None
    missing = [k for k in info.get("missing_keys", []) if not k.startswith("pooler.")]
    if missing or info.get("mismatched_keys"):
        raise MtlError(
            f"model={folder}: the encoder's weights are incomplete ({len(missing)} missing, e.g. "
            f"{(missing or info['mismatched_keys'])[0]!r}); export the run again"
        )
    if isinstance(getattr(getattr(encoder, "pooler", None), "dense", None), nn.Linear):
        encoder.pooler = None  # as in training: the heads pool
    return encoder


def adapted_encoder(folder: Path, peft_meta: dict):
    """The base model an export names with its adapters on it (peft's `PeftModel`), each named
    as in training (a task's name, or `default` for one shared adapter)."""
    peft = peft_module()  # one line naming the extra when peft is missing
    try:
        name, built = str(peft_meta["base_model"]), dict(peft_meta.get("base_config") or {})
        adapters = {str(k): folder / str(v) for k, v in peft_meta["adapters"].items()}
    except (KeyError, TypeError, AttributeError):
        raise MtlError(
            f"model={folder}: {TASKS_FILE} is unreadable; export the run again"
        ) from None
    base = str(folder / "base") if name == "base" else name

    def refused(why: str) -> MtlError:
        return MtlError(
            f"model={folder}: its base model {name} {why}: the export holds adapters for it "
            f"({TASKS_FILE}'s peft.base_model); put the base model there, or export the run "
            "again where it is"
        )

    if base.startswith(("/", ".", "~")) and not Path(base).expanduser().exists():
        raise refused("is not there (moved or deleted)")
    try:
        with quiet_libraries(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # peft asks a deprecated property
            encoder, _ = load_encoder_and_pooler(
                base, config=built.get("config") or None, family=built.get("family")
            )
            first, *others = adapters
            adapted = peft.PeftModel.from_pretrained(encoder, adapters[first], adapter_name=first)
            for adapter in others:
                adapted.load_adapter(adapters[adapter], adapter_name=adapter)
    except (OSError, ValueError) as err:
        raise refused(f"cannot be read ({type(err).__name__})") from None
    adapted.set_adapter(first)
    return adapted
