"""Reading an export folder back (`mtl-export`'s output): the model, tokenizer and tasks.

`mtl_tasks.json` is read as data: every task's type, head and metrics must be mtl's own
(`mtl.inference.trust`) unless the caller trusts the folder, before anything it names is imported;
while the folder is read, nothing outside mtl's own package is imported and transformers'
`trust_remote_code` is refused (`mtl.errors.untrusted`), so a family, a peft config class or an
`auto_map` the folder's files name is one line unless trusted.

It records the sha256 of every other file of the export (`digests`, format 2: weights, configs,
tokenizer files, adapters, `base/`, the standard folders), checked before anything is read: a
file changed after the export (even at the same size, with a valid header), missing, or added
is one line. Exports of format 1 recorded their weights files only; those are checked, and one
line on stderr says so.

The export of a model.peft run (`peft` in `mtl_tasks.json`) holds adapters, not the encoder:
they go on the base model it names (`adapted_encoder`), which must be there: one line if not.
The base's frozen weights as loaded are checked against the digest the export recorded of them
(`peft.base_digest`): another model of the same shape in its place is one line.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from mtl.artifacts import HEADS_FILE, TASKS_FILE, check_digests, damaged, read_weights
from mtl.data.tokenizer import load_tokenizer
from mtl.errors import MtlError, UntrustedCode, refuse_code, remote_code, untrusted
from mtl.inference.trust import check_task
from mtl.models import MultiTaskModel, load_encoder_and_pooler
from mtl.models.lora import base_digest, peft_module
from mtl.models.multitask import model_state
from mtl.quiet import quiet_libraries
from mtl.task_types import task_config, task_type_class

FORMAT = 2  # 2: digests of every file (1: of the weights files only)


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
    check_digests(folder, meta)
    with untrusted(f"model={path}", trust=trust_custom_code):
        check_remote_code(folder)
        tokenizer = load_tokenizer(str(folder))
        if "peft" in meta:
            encoder = adapted_encoder(folder, meta["peft"])
        else:
            encoder = export_encoder(folder)
        return _with_heads(folder, meta, encoder, tokenizer, path)


def _with_heads(folder: Path, meta: dict, encoder, tokenizer, path) -> LoadedModel:
    heads, tasks = {}, {}
    for name, entry in meta["tasks"].items():
        try:
            config = task_config(entry["config"], name)
            h = entry["head"]
            task_type = task_type_class(config.type, name)(name, config)
            heads[name] = task_type.make_head(h["hidden_size"], h["num_labels"], h["dropout"])
            tasks[name] = TaskInfo(task_type, entry["label_names"], config)
        except UntrustedCode:
            raise
        except (TypeError, KeyError, ValueError) as err:
            raise MtlError(
                f"model={path}: task {name!r} in {TASKS_FILE} is malformed ({err}); export the "
                "run again"
            ) from None
    per_task = bool(meta.get("peft", {}).get("per_task"))  # one adapter per task, named by it
    model = MultiTaskModel(encoder, heads, per_task_adapters=per_task)
    weights = read_weights(folder / HEADS_FILE, "export the run again")
    missing, unexpected = model.load_state_dict(model_state(weights), strict=False)
    missing = [k for k in missing if model.owner(k).part == "head"]
    if missing or unexpected:
        raise MtlError(
            f"model={path}: {HEADS_FILE} does not match {TASKS_FILE} "
            f"({(missing or unexpected)[0]!r}); export the run again"
        )
    model.eval()
    return LoadedModel(model, tokenizer, tasks)


def check_remote_code(folder: Path) -> None:
    """One line (unless trusted, `mtl.errors.untrusted`) for a model or tokenizer config in an
    export that names code of its own (`auto_map`: transformers would import it)."""
    for name in ("config.json", "tokenizer_config.json", "base/config.json"):
        names = _auto_map(folder / name)
        if names:
            refuse_code(f"{name}'s auto_map {json.dumps(names)[:120]}")


def _auto_map(path: Path) -> Any:
    """The `auto_map` a transformers config file names (None: none, or no readable file)."""
    try:
        return json.loads(path.read_text()).get("auto_map")
    except (OSError, ValueError, AttributeError):
        return None  # no such file, or unreadable: its reader says so


def export_encoder(folder: Path):
    """The encoder of an export folder, which was saved without its pooler (each head has its
    own): transformers' load report is kept quiet for that, and any other weight missing from
    the folder is a one-line error."""
    from safetensors import SafetensorError
    from transformers import AutoModel

    trust = remote_code(bool(_auto_map(folder / "config.json")), "config.json's auto_map")
    try:
        with quiet_libraries():
            encoder, info = AutoModel.from_pretrained(
                str(folder), output_loading_info=True, trust_remote_code=trust
            )
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
    outside = [a for a in adapters.values() if folder.resolve() not in a.resolve().parents]
    if not adapters or outside:
        raise MtlError(
            f"model={folder}: {TASKS_FILE}'s peft.adapters must name folders in the export "
            f"({outside[0] if outside else 'none named'}); export the run again"
        )
    try:
        with quiet_libraries():
            encoder, _ = load_encoder_and_pooler(
                base, config=built.get("config") or None, family=built.get("family")
            )
    except MtlError:
        raise
    except (OSError, ValueError) as err:
        raise refused(f"cannot be read ({type(err).__name__})") from None
    first, *others = adapters
    try:
        with quiet_libraries(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # peft asks a deprecated property
            adapted = peft.PeftModel.from_pretrained(encoder, adapters[first], adapter_name=first)
            for adapter in others:
                adapted.load_adapter(adapters[adapter], adapter_name=adapter)
    except Exception as err:  # peft's: an adapter_config.json it cannot use, weights that misfit
        detail = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise MtlError(
            f"model={folder}: an adapter cannot be put on its base model {name} ({detail}); "
            "export the run again"
        ) from None
    adapted.set_adapter(first)
    recorded = peft_meta.get("base_digest")
    if recorded is not None and base_digest(adapted) != recorded:
        raise refused(
            "is not the one the adapters were trained on (its weights' digest is not the one "
            "the export recorded)"
        )
    return adapted
