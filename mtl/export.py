"""Export a trained run as a self-contained model folder, and load it back (`mtl.load_model`).

An export folder holds the encoder and the tokenizer in Hugging Face format (`save_pretrained`),
`heads.safetensors` (every head's weights, keyed `<task>.<parameter>`) and `mtl_tasks.json`
(per task: its `TaskConfig`, label names and the head's constructor arguments). The weights come
from a run folder's best model (else its latest complete checkpoint) or a checkpoint folder;
the tasks and model settings from the run's `.hydra/config.yaml`. A run writes `<run>/export`
itself when it ends (`trainer.export`).

Each task also gets `<export>/<task>/`: a standard transformers model (`AutoModelFor...`, with
its labels) and its tokenizer (`model_max_length` = the task's `max_length`), for
`transformers.pipeline` and any code that reads such folders (`mtl.export_hf`). A task whose
head has no transformers counterpart (mean pooling, a head of your own, an encoder that is not
BERT-family) gets none, and one line on stderr saying why.

    mtl-export <run folder | checkpoint folder> [out]     (default out: <run>/export)
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtl.errors import MtlError
from mtl.export_hf import standard_model

TASKS_FILE = "mtl_tasks.json"
HEADS_FILE = "heads.safetensors"
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


def is_export(path: Path) -> bool:
    return (Path(path) / TASKS_FILE).is_file()


def run_folder(path: str | Path) -> Path:
    """The run folder of a run or checkpoint folder (the one with `.hydra/config.yaml`)."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise MtlError(f"model={path}: no such folder; give an mtl run folder or export folder")
    for candidate in (p, p.parent, p.parent.parent):
        if (candidate / ".hydra" / "config.yaml").is_file():
            return candidate
    raise MtlError(
        f"model={path}: not an mtl run or export folder (no .hydra/config.yaml or "
        f"{TASKS_FILE}); give a run folder, one of its checkpoints, or an mtl-export folder"
    )


def trained_model(path: str | Path):
    """(model with the trained weights, tokenizer, {name: Task}) of a run or checkpoint folder."""
    from omegaconf import OmegaConf

    from mtl.checkpoint import trained_weights
    from mtl.config import validate
    from mtl.registry import build_model, build_tasks

    run = run_folder(path)
    try:
        state, _ = trained_weights(str(path))
    except MtlError:
        raise MtlError(
            f"model={path}: the run has no saved model (no checkpoints/best and no complete "
            "checkpoint); train it longer or give another run"
        ) from None
    cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
    settings = validate(cfg)
    settings = dataclasses.replace(
        settings, model=dataclasses.replace(settings.model, init_from=None)
    )
    tasks, tokenizer = build_tasks(settings, int(cfg.get("seed", 0) or 0))
    model = build_model(settings, tasks)
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise MtlError(
            f"model={path}: the saved weights do not fit the run's config "
            f"({str(err).splitlines()[0]}); was the config changed after training?"
        ) from None
    model.eval()
    return model, tokenizer, tasks, settings


def export_model(
    run_or_checkpoint: str | Path, out_dir: str | Path, *, standard: bool = True
) -> Path:
    """Write the export folder of a run (its best model) or checkpoint folder; returns it.
    `standard`: also a transformers model folder per task (`write_export`)."""
    model, tokenizer, tasks, settings = trained_model(run_or_checkpoint)
    return write_export(model, tokenizer, tasks, settings, out_dir, standard=standard)


def write_export(model, tokenizer, tasks: dict, settings, out_dir: str | Path, *, standard=True):
    """The export folder of an in-memory model (eval mode while writing), whole or not at all:
    written beside `out_dir` as `.tmp-<name>` and renamed into place.

    With `standard`, each task whose head maps onto a transformers class also gets
    `<out>/<task>/`, that model and its tokenizer (`standard_model`); any other task gets one
    line on stderr saying why and what to use instead."""
    from transformers.utils import logging as hf_logging

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = out.parent / f".tmp-{out.name}", out.parent / f".old-{out.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    was_training = model.training
    model.eval()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # "Writing model shards" once per folder
    try:
        _write_multitask(model, tokenizer, tasks, settings.model.head_dropout, tmp)
        for name, task in tasks.items() if standard else ():
            config = task.task_type.config
            hf, reason = standard_model(model, name, task.task_type, task.label_names, tokenizer)
            if hf is None:
                print(f"mtl: export: task {name!r}: {reason}", file=sys.stderr)
                continue
            hf.save_pretrained(tmp / name)
            task_tokenizer = copy.deepcopy(tokenizer)
            task_tokenizer.model_max_length = config.max_length  # pipelines truncate alike
            task_tokenizer.save_pretrained(tmp / name)
        if out.exists():
            shutil.rmtree(old, ignore_errors=True)
            out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        model.train(was_training)
        if bars:
            hf_logging.enable_progress_bar()
    return out


def _write_multitask(model, tokenizer, tasks: dict, head_dropout: float, out: Path) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    model.encoder.save_pretrained(out)
    tokenizer.save_pretrained(out)
    heads = {
        key.removeprefix("heads."): value.detach().cpu().contiguous()
        for key, value in model.state_dict().items()
        if key.startswith("heads.")
    }
    save_file(heads, out / HEADS_FILE)
    hidden = model.encoder.config.hidden_size
    meta = {
        "format": FORMAT,
        "tasks": {
            name: {
                "config": dataclasses.asdict(task.task_type.config),
                "label_names": task.label_names,
                "head": {
                    "class": f"{type(model.heads[name]).__module__}."
                    f"{type(model.heads[name]).__qualname__}",
                    "hidden_size": hidden,
                    "num_labels": task.num_labels,
                    "dropout": head_dropout,
                },
            }
            for name, task in tasks.items()
        },
    }
    (out / TASKS_FILE).write_text(json.dumps(meta, indent=1))


def load_export(path: str | Path) -> LoadedModel:
    """The model of an export folder (eval mode)."""
    from safetensors.torch import load_file

    from mtl.config import TaskConfig
    from mtl.data.tokenizer import load_tokenizer
    from mtl.models import MultiTaskModel, load_encoder
    from mtl.task_types import task_type_class

    folder = Path(path)
    try:
        meta = json.loads((folder / TASKS_FILE).read_text())
        spec = meta["tasks"]
    except (OSError, ValueError, KeyError, TypeError):
        raise MtlError(f"model={path}: {TASKS_FILE} is unreadable; export the run again") from None
    tokenizer = load_tokenizer(str(folder))
    encoder = load_encoder(str(folder))
    heads, tasks = {}, {}
    for name, entry in spec.items():
        config = TaskConfig(**entry["config"])
        task_type = task_type_class(config.type, name)(name, config)
        h = entry["head"]
        heads[name] = task_type.make_head(h["hidden_size"], h["num_labels"], h["dropout"])
        tasks[name] = TaskInfo(task_type, entry["label_names"], config)
    model = MultiTaskModel(encoder, heads)
    state = {f"heads.{key}": value for key, value in load_file(folder / HEADS_FILE).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k.startswith("heads.")]
    if missing or unexpected:
        raise MtlError(
            f"model={path}: {HEADS_FILE} does not match {TASKS_FILE} "
            f"({(missing or unexpected)[0]!r}); export the run again"
        )
    model.eval()
    return LoadedModel(model, tokenizer, tasks)


def load_model(path: str | Path) -> LoadedModel:
    """A trained model from an export folder, or from a run / checkpoint folder (exported to a
    temporary folder first). Returns `.model` (a `MultiTaskModel` in eval mode), `.tokenizer`
    and `.tasks` ({name: TaskInfo(task_type, label_names, config)})."""
    p = Path(path).expanduser()
    if is_export(p):
        return load_export(p)
    run_folder(p)  # a one-line error for a folder that is neither
    with tempfile.TemporaryDirectory(prefix="mtl-export-") as tmp:
        export_model(p, tmp, standard=False)
        return load_export(tmp)  # weights and tokenizer are read into memory


def quiet() -> None:
    """No transformers progress bars or warnings on the command line (errors are one line)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def main(argv: list[str] | None = None) -> None:
    """`mtl-export <run folder | checkpoint folder> [out]`."""
    quiet()
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2 or args[0] in ("-h", "--help"):
        print("usage: mtl-export <run folder | checkpoint folder> [out]", file=sys.stderr)
        sys.exit(2)
    try:
        source = Path(args[0])
        out = Path(args[1]) if len(args) > 1 else run_folder(source) / "export"
        export_model(source, out)
    except MtlError as err:
        print(f"mtl: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(out)
